"""The per-statement decision every guarded cursor shares (``decide``): probe, rules, report; the
per-connection facts it reads (``connection_state``), the guard's own statements on the caller's
connection (``guard_statements``) and the aggregate rule's connection side (``aggregate_check``).
Stdlib-only at import: the analysis and the rules are imported when a result needs them."""
