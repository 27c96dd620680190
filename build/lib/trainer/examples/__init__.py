"""Example run specs and the builders of the baseline task sets (see docs/trainer.md)."""
