"""tests/test_dropin_row_cap.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_row_cap import *  # noqa: F403
