"""tests/test_dropin_backup.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_backup import *  # noqa: F403

# Differs by design: sqlite3's own backup() refuses a proxy as its target (connect()'s connections,
# being sqlite3.Connection objects, are accepted); that test covers both.
del test_raw_backup_into_guarded_needs_unwrap  # noqa: F821
