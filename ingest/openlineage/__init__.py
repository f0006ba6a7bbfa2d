"""OpenLineage in: ``POST /api/v1/lineage`` (the path OpenLineage clients and Marquez use),
validated against the spec's published JSON Schema and stored as CloudEvents in the log.
docs/openlineage.md describes the mapping."""
