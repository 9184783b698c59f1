"""The sqlglot analysis: the DISTINCT rewrites as pure functions of SQL text, the join graph, the
key-based provenance of duplicates, the schema facts read from each engine's catalog, and the
aggregate rule's plan. With ``_rules``, the only place that imports sqlglot; imported lazily, when a
rule has a result to act on."""

from . import sqlglot_build

# Before any module of this package imports sqlglot: a compiled build (sqlglotc) of another version than
# sqlglot's breaks ``import sqlglot``; check() then loads the pure-Python modules instead (see there).
sqlglot_build.check()
