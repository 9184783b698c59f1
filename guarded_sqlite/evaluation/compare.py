"""Several guard presets on the same predictions, side by side (``eval --guard patch,text_to_sql,paper``).

Each preset is one ordinary ``evaluate`` run; the comparison keeps the reports and renders one table
with a row per preset. Runs are independent, so gold queries run once per preset (on Spider dev about
a second each on two cores); the baseline columns agree across presets by construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..policy import GuardPreset
from .options import EVAL_GUARDS
from .records import JsonMixin
from .report import EvalReport


@dataclass(frozen=True)
class PresetComparison(JsonMixin):
    """``evaluate`` under each of several presets, on the same inputs."""

    reports: Mapping[str, EvalReport]
    """The evaluation of each preset, in the order asked for."""


def check_guards(guards: Sequence[str]) -> tuple[str, ...]:
    """The preset names, de-duplicated in order; each must be one of ``EVAL_GUARDS``."""
    names = tuple(dict.fromkeys(guards))
    if not names:
        raise ValueError("compare needs at least one guard preset")
    for name in names:
        if name not in EVAL_GUARDS:
            raise ValueError(f"guard presets must be among {', '.join(EVAL_GUARDS)}, not {name!r}")
    return names


def compare(db_root: Any, gold: Any, pred: Any, guards: Sequence[str], **options: Any) -> PresetComparison:
    """Run ``evaluate(db_root, gold, pred, guard=name, **options)`` for each preset name in ``guards``."""
    from .api import evaluate

    if "guard" in options:
        raise TypeError("compare takes its presets as guards=, not guard=")
    names = check_guards(guards)
    reports = {name: evaluate(db_root, gold, pred, guard=cast(GuardPreset, name), **options) for name in names}
    return PresetComparison(reports)
