"""What differs between database drivers (SQLite, DuckDB, PostgreSQL): how the guard re-executes a
statement read-only, and each driver's quirks. Imports ``_core`` only."""
