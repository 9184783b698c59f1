"""Every drop-in test runs through ``connect()`` and through ``wrap()`` (see tests/connect_or_wrap.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _connect_or_wrap(connect_or_wrap: str) -> str:
    return connect_or_wrap
