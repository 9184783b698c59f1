"""The guard on DuckDB and PostgreSQL next to SQLite."""
