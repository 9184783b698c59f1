"""The guard's knobs: one frozen ``GuardPolicy`` per connection.

``guard=`` accepts a preset name or a policy; ``resolve_policy`` turns either into a policy so the rest of
the package only ever sees one type. Thresholds default to the paper's operating points; the default
preset, ``"patch"``, adds the duplicate-provenance checks (``provenance="keys"``) to the paper's rules.

Presets (``guard=NAME``, or the ``GuardPolicy`` constructor named after each):

* ``"patch"`` (``GuardPolicy()``): P1 on a flagged explosion only where the catalog establishes join
  amplification (never on value repeats or an ``unknown`` verdict) and the data shows join copies,
  removing exactly those; every DISTINCT is kept as written (no P2). What ``install()`` puts under
  applications.
* ``"text_to_sql"`` (``GuardPolicy.text_to_sql()``): like ``"patch"``, but once join copies are shown P1
  serves the distinct rows, and it also fires below ``tau_inject`` on join amplification with
  ``dup_ratio >= tau_amplified``. For SQL a model wrote to answer a question.
* ``"paper"`` (``GuardPolicy.paper()``): the paper's literal P1/P2, no provenance, to reproduce its numbers.
* ``"observe"`` and ``"off"``: the modes of the same names (``GuardPolicy(mode=...)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from ._core.probe import mentions_distinct, min_rows_for_removal

if TYPE_CHECKING:
    from .rescue import Rescuer
    from .sinks import ReportSink

GuardMode = Literal["patch", "observe", "off"]
_MODES: tuple[str, ...] = get_args(GuardMode)
GuardPreset = Literal["patch", "text_to_sql", "paper", "observe", "off"]
"""The names ``guard=`` accepts (connect, wrap, install, ``resolve_policy``)."""
PRESETS: tuple[str, ...] = get_args(GuardPreset)
ProvenanceRule = Literal["keys", "text_to_sql", "off"]
_PROVENANCE_RULES: tuple[str, ...] = get_args(ProvenanceRule)

TEXT_TO_SQL_TAU = 0.30
"""``tau_amplified``'s default: the threshold leave-one-database-out cross-validation chose on Spider dev
(excluding wta_1) for P1 on join amplification below ``tau_inject``, in 19 of 19 folds
(``benchmarks/provenance_spider_results.md``)."""
RescueOrder = Literal["rescue_first", "patch_first"]
_ORDERS: tuple[str, ...] = get_args(RescueOrder)


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

    rescue: Rescuer | None = None
    """Who picks a better candidate when a flagged statement came with ``candidates=``:
    ``DupRatioSelector()``, ``LLMRescue(...)``, or any callable taking a ``RescueRequest`` and returning
    a candidate index or None. None: candidates are ignored."""

    order: RescueOrder = "rescue_first"
    """``"rescue_first"`` (the paper's v2): rescue the selection, then patch what was chosen.
    ``"patch_first"`` (v1): patch the selection, then let the rescue replace it."""

    rerun_timeout: float = 5.0
    """Seconds any re-execution by the guard (a patch's rerun, each rescue candidate) may run before
    the engine interrupts it; an interrupted patch keeps the original rows. ``float("inf")``: no limit
    (no deadline is set at all)."""

    max_rescues: int | None = None
    """Most rescues per connection; None for no cap. Once reached, rescues stop and reports say so."""

    max_rescue_cost: float | None = None
    """Most US dollars of rescue spend per connection (known costs only); None for no cap."""

    provenance: ProvenanceRule = "keys"
    """How P1 and P2 use the duplicate-provenance analysis (``guarded_sqlite._analysis.provenance``: declared keys
    read from the catalog, only when a rule is about to fire). ``"keys"`` (the ``"patch"`` preset): P1
    fires only on established join amplification with join copies on the data, and removes exactly the
    copies; it leaves ``value_repeats`` and ``unknown`` alone (fail closed: the explosion stays
    flagged); P2 never runs (every DISTINCT is kept as written). ``"text_to_sql"``: the same, except
    that P1 serves the distinct rows once copies are shown and also fires below ``tau_inject`` on join
    amplification (see ``tau_amplified``). ``"off"`` (the ``"paper"`` preset): the paper's P1 and P2, no
    analysis, no catalog read."""

    tau_amplified: float = TEXT_TO_SQL_TAU
    """With ``provenance="text_to_sql"`` only: P1 also fires on a result below ``tau_inject`` whose
    ``dup_ratio >= tau_amplified`` when its duplicates are join amplification. Such a result is not
    flagged (``trigger`` stays None); the report shows the action and the reason. 0.30 is the
    leave-one-database-out choice on Spider dev (``TEXT_TO_SQL_TAU``)."""

    byte_cap: int | None = 256 * 2**20
    """About how many bytes of rows may be buffered per query (besides ``row_cap``), estimated from
    sampled rows: the length of their text and blob values plus a fixed cost per value and per row.
    Past it, as past ``row_cap``, the result is not probed and the rest streams from the driver. The
    first 16 rows are always buffered. None: rows only."""

    on_report: ReportSink | None = None
    """Called with the ``GuardReport`` of every statement run through a connection under this policy
    (any cursor, any library), right after it executed, failed included; not in mode ``"off"``. What
    it raises is logged and never reaches the statement; statements it runs itself are not delivered
    back to it. Building a report for every statement costs about 2 µs each; None: reports are built
    only when read."""

    @classmethod
    def text_to_sql(cls, **changes: Any) -> GuardPolicy:
        """The ``"text_to_sql"`` preset: ``GuardPolicy(provenance="text_to_sql", **changes)``."""
        return cls(**{"provenance": "text_to_sql", **changes})

    @classmethod
    def paper(cls, **changes: Any) -> GuardPolicy:
        """The ``"paper"`` preset, the paper's literal P1/P2: ``GuardPolicy(provenance="off", **changes)``."""
        return cls(**{"provenance": "off", **changes})

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"guard mode must be one of {', '.join(map(repr, _MODES))}, not {self.mode!r}")
        if not 0.0 < self.tau_inject <= 1.0:
            raise ValueError(f"tau_inject must be in (0, 1], not {self.tau_inject!r}")
        if not 0.0 <= self.tau_remove < 1.0:
            raise ValueError(f"tau_remove must be in [0, 1), not {self.tau_remove!r}")
        if isinstance(self.row_cap, bool) or not isinstance(self.row_cap, int) or self.row_cap < 1:
            raise ValueError(f"row_cap must be a positive int, not {self.row_cap!r}")
        if self.byte_cap is not None and (
            isinstance(self.byte_cap, bool) or not isinstance(self.byte_cap, int) or self.byte_cap < 1
        ):
            raise ValueError(f"byte_cap must be a positive int or None, not {self.byte_cap!r}")
        if self.order not in _ORDERS:
            raise ValueError(f"order must be one of {', '.join(map(repr, _ORDERS))}, not {self.order!r}")
        if self.on_report is not None and not callable(self.on_report):
            raise TypeError(f"on_report must be callable (a GuardReport -> None), not {type(self.on_report).__name__}")
        if self.rescue is not None and not callable(self.rescue):
            raise TypeError(
                f"rescue must be callable (a RescueRequest -> index or None), not {type(self.rescue).__name__}"
            )
        timeout = self.rerun_timeout
        # NaN fails "> 0" too; an infinite timeout is allowed and means no limit.
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(
                f"rerun_timeout must be a positive number of seconds (float('inf') for no limit), not {timeout!r}"
            )
        if self.max_rescues is not None and self.max_rescues < 0:
            raise ValueError(f"max_rescues must be >= 0 or None, not {self.max_rescues!r}")
        if self.max_rescue_cost is not None and self.max_rescue_cost < 0:
            raise ValueError(f"max_rescue_cost must be >= 0 or None, not {self.max_rescue_cost!r}")
        if self.provenance not in _PROVENANCE_RULES:
            raise ValueError(
                f"provenance must be one of {', '.join(map(repr, _PROVENANCE_RULES))}, not {self.provenance!r}"
            )
        if isinstance(self.tau_amplified, bool) or not 0.0 < self.tau_amplified <= 1.0:
            raise ValueError(f"tau_amplified must be in (0, 1], not {self.tau_amplified!r}")
        # P2 is the paper's rule: under the key-based presets a DISTINCT stays as written, so no
        # DISTINCT result is ever a P2 candidate there (and none costs a parse).
        p2_rows = min_rows_for_removal(self.tau_remove) if self.provenance == "off" else _NEVER
        object.__setattr__(self, "_p2_min_rows", p2_rows)
        below = self.mode == "patch" and self.provenance == "text_to_sql" and self.tau_amplified < self.tau_inject
        object.__setattr__(self, "_tau_act", self.tau_amplified if below else self.tau_inject)

    _p2_min_rows: int = field(init=False, repr=False, compare=False, default=0)
    """Smallest DISTINCT result P2 could ever commit on; smaller ones skip P2 without parsing."""

    _tau_act: float = field(init=False, repr=False, compare=False, default=0.80)
    """Smallest ``dup_ratio`` at which a patch rule could act: ``tau_amplified`` when P1 may fire below
    ``tau_inject`` (text_to_sql), else ``tau_inject``. Results below it never reach the analysis."""

    @property
    def p1_threshold(self) -> float:
        """The smallest ``dup_ratio`` at which P1 may fire under this policy: ``tau_amplified`` for the
        ``"text_to_sql"`` preset in patch mode, else ``tau_inject``."""
        return self._tau_act

    @property
    def preset(self) -> str:
        """The preset name this policy's mode and provenance rule correspond to (thresholds aside)."""
        if self.mode != "patch":
            return self.mode
        return {"keys": "patch", "text_to_sql": "text_to_sql", "off": "paper"}[self.provenance]


_NEVER = 2**62
"""``_p2_min_rows`` of a policy under which P2 never runs."""


def removal_applies(sql: str, rows: int, unique_rows: int, policy: GuardPolicy) -> bool:
    """Whether P2 (DISTINCT removal) is worth considering for a result: duplicate-free, big enough to
    ever commit, and of SQL that says DISTINCT somewhere. Decided without parsing; the rewrite then
    checks that the DISTINCT is the outermost SELECT's."""
    return unique_rows == rows and rows >= policy._p2_min_rows and mentions_distinct(sql)


def removal_row_limit(rows: int, tau_remove: float) -> int:
    """Most rows the result without DISTINCT may have for P2 to commit on a DISTINCT result of ``rows``
    rows: ``(m - rows) / m <= tau_remove`` means ``m <= rows / (1 - tau_remove)``. One row of slack
    covers float rounding; the exact check runs on the rows afterwards. A re-execution stops fetching
    past this limit, since nothing it could still return would let P2 commit."""
    return int(rows / (1.0 - tau_remove)) + 1


GuardSpec = GuardPolicy | GuardPreset | None

DEFAULT_POLICY = GuardPolicy()


def resolve_policy(guard: GuardSpec) -> GuardPolicy:
    """Turn the ``guard=`` argument (None, a preset name, or a policy) into a policy."""
    if guard is None:
        return DEFAULT_POLICY
    if isinstance(guard, GuardPolicy):
        return guard
    if isinstance(guard, str):
        if guard == "text_to_sql":
            return GuardPolicy.text_to_sql()
        if guard == "paper":
            return GuardPolicy.paper()
        if guard not in _MODES:
            raise ValueError(f"guard mode must be one of {', '.join(map(repr, PRESETS))}, not {guard!r}")
        return GuardPolicy(mode=guard)
    raise TypeError(
        f"guard must be a GuardPolicy or one of {', '.join(map(repr, PRESETS))}, not {type(guard).__name__}"
    )
