"""tests/test_dropin_subclasses.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_subclasses import *  # noqa: F403
