"""Drop-in compatibility: what connect() and wrap() give must behave as sqlite3 does."""
