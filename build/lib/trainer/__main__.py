"""Entry point for `python -m trainer`."""

from trainer.cli import main

raise SystemExit(main())
