"""tests/test_dropin_install.py against wrap()'s proxies (see __init__.py)."""

from tests.dropin.test_dropin_install import *  # noqa: F403
