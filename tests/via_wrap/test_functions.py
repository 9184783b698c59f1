"""tests/test_dropin_functions.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_functions import *  # noqa: F403
