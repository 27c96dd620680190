"""A learning run on CPU: baseline, SFT and GRPO of the demo model on BFCL and WorkBench (see prepare.py)."""
