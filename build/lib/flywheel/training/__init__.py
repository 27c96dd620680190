"""Jobs (eval, sft, grpo, gate), the Celery tasks that run trainer, metrics and samples."""
