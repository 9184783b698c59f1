"""tests/test_dropin_errors.py against wrap()'s proxies (see __init__.py)."""

from tests.test_dropin_errors import *  # noqa: F403
