"""tests/test_dropin_module.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_module import *  # noqa: F403
