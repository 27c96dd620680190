"""Uploads and the ingestion API; parsers/ holds one module per input format."""
