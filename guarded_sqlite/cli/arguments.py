"""argparse ``type=`` converters shared by the CLI's subcommands (``cli``, ``cli_query``, ``mcp_server``),
so that each subcommand's parser can be built without importing the CLI module that dispatches them."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["int_at_least", "non_negative_int", "positive_float"]


def positive_float(text: str) -> float:
    """A number above 0 (``inf`` included: "no limit" where an option allows it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type=`` for integers of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}: {text!r}")
        return value

    return parse


non_negative_int = int_at_least(0)
"""An integer of at least 0."""
