"""tests/test_dropin_errors.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_errors import *  # noqa: F403
