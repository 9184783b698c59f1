"""tests/test_dropin_factories.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_factories import *  # noqa: F403
