"""tests/test_repros_rows.py against wrap()'s proxies (see __init__.py)."""

from tests.repros.test_repros_rows import *  # noqa: F403
