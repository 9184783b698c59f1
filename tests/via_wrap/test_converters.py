"""tests/test_dropin_converters.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_converters import *  # noqa: F403
