"""trainer: the model half of agent-flywheel, in plain Python.

It parses what models emit, scores it with verifiers, runs environments, evaluates,
trains LoRA adapters (SFT, GRPO) and serves them. The web app (`flywheel`) talks to it
through the job protocol in DESIGN.md: a `run.json` spec in, one JSON event per line out.

This package never imports Django or `flywheel`; `contracts`, `parsing` and `verifiers`
never import torch, so the web app can score and preview without loading a model.
"""
