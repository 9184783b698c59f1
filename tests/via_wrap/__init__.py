"""The drop-in tests (tests/test_dropin_*.py) run again against ``wrap()``'s proxies.

``guarded_sqlite.connect`` returns ``sqlite3.Connection`` subclasses; the wrapt proxies that
``wrap()`` puts around connections the library did not open must keep the same drop-in behaviour.
Each module here imports one drop-in module's tests; ``conftest.py`` makes ``guarded_sqlite.connect``
open a plain connection and return it wrapped, as ``connect()`` did before the fast path.
"""
