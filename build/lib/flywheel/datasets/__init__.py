"""Regression tasks, task sets, immutable snapshots and export."""
