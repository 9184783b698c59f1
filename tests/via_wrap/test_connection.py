"""tests/test_dropin_connection.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_connection import *  # noqa: F403
