"""The connections and cursors users hold: ``connect()``'s ``sqlite3`` subclasses (``sqlite_fast``) and
``wrap()``'s proxies, one driver per module (``proxy``, ``proxy_duckdb``, ``proxy_psycopg``), with
the row factories applied to served rows and ``iterdump()``. They do the I/O and leave every
decision to ``_guard``."""
