"""The GraphQL face: lineage and audit questions over the causal graph, one query each."""
