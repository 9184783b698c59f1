"""tests/test_join_copies.py against wrap()'s proxies (see __init__.py)."""

from tests.rules.test_join_copies import *  # noqa: F403
