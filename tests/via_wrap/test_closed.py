"""tests/test_dropin_closed.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_closed import *  # noqa: F403
