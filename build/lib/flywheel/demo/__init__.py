"""The demo: its data loading, the flywheel's loop run on it, the task and commands that drive it."""
