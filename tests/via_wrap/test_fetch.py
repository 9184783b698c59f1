"""tests/test_dropin_fetch.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_fetch import *  # noqa: F403
