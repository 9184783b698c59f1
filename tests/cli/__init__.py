"""The guarded-sqlite command line: query, --version and demo."""
