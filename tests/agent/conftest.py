"""Fixtures the agent tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from guarded_sqlite.cli.demo import build_shop


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """The demo's shop database (customers, orders, order items, products) in a fresh file."""
    path = tmp_path / "shop.db"
    build_shop(path)
    return path
