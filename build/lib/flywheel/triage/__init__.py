"""Review queues, failure buckets, auto-suggestions and notes."""
