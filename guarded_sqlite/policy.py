"""The guard's knobs: one frozen ``GuardPolicy`` per connection.

``guard=`` accepts a mode name or a policy; ``resolve_policy`` turns either into a policy so the rest of
the package only ever sees one type. Defaults are the paper's operating points.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union, get_args

from .probe import min_rows_for_removal

GuardMode = Literal["patch", "observe", "off"]
_MODES: tuple[str, ...] = get_args(GuardMode)


@dataclass(frozen=True)
class GuardPolicy:
    """How a guarded connection treats each query's result."""

    mode: GuardMode = "patch"
    """``"patch"``: probe and repair; ``"observe"``: probe and report, never change a result or run
    anything extra; ``"off"``: pass everything through unprobed (a report still says so)."""

    tau_inject: float = 0.80
    """Probe threshold: a result with ``dup_ratio >= tau_inject`` is flagged ``cartesian_explosion``,
    and P1 (DISTINCT injection) may fire on it. 0.80 means at least 5 rows per distinct row."""

    tau_remove: float = 0.10
    """P2 (DISTINCT removal) commits only if the result without DISTINCT has ``dup_ratio <= tau_remove``
    (and strictly more rows, and the same set of rows)."""

    inject_distinct: bool = True
    """Whether P1 may fire. With False, explosions are still flagged and reported."""

    remove_distinct: bool = True
    """Whether P2 may fire. P2 re-executes large enough DISTINCT queries once without DISTINCT."""

    row_cap: int = 1_000_000
    """Most rows buffered and probed per query. A larger result is not probed: its first rows are
    served from the buffer and the rest stream from SQLite unchanged, so memory stays bounded."""

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"guard mode must be one of {', '.join(map(repr, _MODES))}, not {self.mode!r}")
        if not 0.0 < self.tau_inject <= 1.0:
            raise ValueError(f"tau_inject must be in (0, 1], not {self.tau_inject!r}")
        if not 0.0 <= self.tau_remove < 1.0:
            raise ValueError(f"tau_remove must be in [0, 1), not {self.tau_remove!r}")
        if isinstance(self.row_cap, bool) or not isinstance(self.row_cap, int) or self.row_cap < 1:
            raise ValueError(f"row_cap must be a positive int, not {self.row_cap!r}")
        object.__setattr__(self, "_p2_min_rows", min_rows_for_removal(self.tau_remove))

    _p2_min_rows: int = field(init=False, repr=False, compare=False, default=0)
    """Smallest DISTINCT result P2 could ever commit on; smaller ones skip P2 without parsing."""


GuardSpec = Union[GuardPolicy, GuardMode, None]

DEFAULT_POLICY = GuardPolicy()


def resolve_policy(guard: GuardSpec) -> GuardPolicy:
    """Turn the ``guard=`` argument (None, a mode name, or a policy) into a policy."""
    if guard is None:
        return DEFAULT_POLICY
    if isinstance(guard, GuardPolicy):
        return guard
    if isinstance(guard, str):
        return GuardPolicy(mode=guard)  # type: ignore[arg-type]  # validated in __post_init__
    raise TypeError(f"guard must be a GuardPolicy or one of {', '.join(map(repr, _MODES))}, not {type(guard).__name__}")
