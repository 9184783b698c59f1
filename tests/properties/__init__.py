"""Property-based (hypothesis) invariant suites over generated tables and queries."""
