"""The guard's rules: probe verdicts, P1/P2, provenance, the aggregate rule, joins, rewrites, copies,
confirmations, paging, presets, schema facts and reports."""
