"""The sqlglot analysis: the DISTINCT rewrites as pure functions of SQL text, the join graph, the
key-based provenance of duplicates, the schema facts read from each engine's catalog, and the
aggregate rule's plan. With ``_rules``, the only place that imports sqlglot; imported lazily, when a
rule has a result to act on."""
