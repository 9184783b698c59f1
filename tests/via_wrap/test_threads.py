"""tests/test_dropin_threads.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_threads import *  # noqa: F403
