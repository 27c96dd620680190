"""Model versions, gate results, promotion, rollback and the live pointer."""
