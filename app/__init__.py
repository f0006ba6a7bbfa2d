"""Causeway: an append-only, event-sourced lineage store for AI systems, on PostgreSQL."""
