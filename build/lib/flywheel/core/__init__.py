"""Shared bits: base models, agents, roles and permissions, API tokens, the audit log."""
