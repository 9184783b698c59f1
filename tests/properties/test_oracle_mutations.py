"""The aggregate oracle (``test_deciding_oracle``) tests something, and can fail (issue 42, item 5).

1. **Most drawn examples inflate.** For every shape, a fixed sample of its cases (hypothesis at seed 0,
   generation only, ``SAMPLE`` cases) runs on SQLite, and the share whose statement's rows differ from the
   truth must reach the shape's floor (``FLOORS``: the share measured when the floor was set, less a
   margin). A generator that stops drawing fan-out data fails here, not silently in the oracle.
2. **With one shape's check switched off, the oracle fails, in every run.** Each mutation patches the
   aggregate rule so that one shape's check is gone (the inner SELECTs never planned, their checks
   skipped, or the rule returning None for a CASE label, an ``IN`` chosen by ranking, a window), and the
   oracle's SQLite property over that shape, at each of ``SEEDS`` (one seed for the shapes with a single
   inner SELECT, ``ONE_SEED``) with at most ``MUTANT_EXAMPLES`` examples, must raise its AssertionError.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings

from .test_deciding_oracle import Case, cases, nearly, on_sqlite

SAMPLE = 60
SEEDS = (0, 1, 2)
MUTANT_EXAMPLES = 40
QUICK = settings(
    database=None,
    deadline=None,
    phases=[Phase.generate],
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
)

# The share of SAMPLE cases (seed 0, SQLite) whose statement's rows differ from the truth, as measured when
# the floors were set (after; the floor is about 10 points below): rank 78%, having 73%, derived 42% (an
# outer MIN rarely reads the inflated group), cte 45%, scalar 78%, IN by HAVING 47%, IN by ranking 48%,
# window 62%, label 75%, exists 78%, two derived tables 63%, two scalar subqueries 75%, UNION ALL 88%,
# outer SUM with an IN by HAVING 60%, derived table joined back 60%. Before issue 42 (1,500 cases, seed 0,
# every shape mixed): 15% in all; rank 19%, having 11%, derived 18%, cte 15%, scalar 34%, IN 2%, window 2%,
# label 5%, exists 24%; no composite shape was drawn.
FLOORS: dict[tuple[str, str | None], float] = {
    ("rank", None): 0.65,
    ("having", None): 0.6,
    ("derived", None): 0.3,
    ("cte", None): 0.35,
    ("scalar", None): 0.65,
    ("in", "having"): 0.35,
    ("in", "top"): 0.35,
    ("window", None): 0.5,
    ("label", None): 0.65,
    ("exists", None): 0.65,
    ("minus", None): 0.5,
    ("scalars", None): 0.65,
    ("union", None): 0.75,
    ("outer_in", None): 0.5,
    ("joinback", None): 0.5,
}


def differs(case: Case) -> bool:
    """Whether ``case``'s statement serves other rows than its truth, on SQLite."""
    raw = sqlite3.connect(":memory:")
    try:
        for statement in [*case.ddl("sqlite"), *case.inserts()]:
            raw.execute(statement)
        sql, params, ordered = case.render("sqlite", truth=False)
        truth_sql, truth_params, _ = case.render("sqlite", truth=True)
        written = raw.execute(sql, params or ()).fetchall()
        truth = raw.execute(truth_sql, truth_params or ()).fetchall()
        return not nearly(written, truth, ordered)
    finally:
        raw.close()


def inflated_share(shape: str, outer: str | None) -> float:
    seen: list[bool] = []

    @seed(0)
    @settings(QUICK, max_examples=SAMPLE)
    @given(case=cases("sqlite", shape, outer))
    def sample(case: Case) -> None:
        seen.append(differs(case))

    sample()
    return sum(seen) / len(seen)


@pytest.mark.parametrize(("shape", "outer"), list(FLOORS), ids=[f"{s}-{o}" if o else s for s, o in FLOORS])
def test_most_drawn_examples_inflate(shape: str, outer: str | None) -> None:
    share = inflated_share(shape, outer)
    print(f"{shape} {outer or ''}: {share:.0%} inflated")
    assert share >= FLOORS[shape, outer], f"{shape}/{outer}: {share:.0%} of {SAMPLE} cases inflate"


# --------------------------------------------------------------------------------------------------
# Mutations: one shape's check switched off
# --------------------------------------------------------------------------------------------------


@contextmanager
def inner_selects_not_planned(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every SELECT but the outer one is left out of the plan (issue 42's item 1 undone: c25, c26)."""
    from guarded_sqlite._analysis import planning
    from guarded_sqlite._analysis.deciding import InnerScopes

    monkeypatch.setattr(planning, "inner_scopes", lambda *args, **kwargs: InnerScopes())
    yield


def _rule_with(monkeypatch: pytest.MonkeyPatch, confirm: Callable[..., Any]) -> None:
    """The aggregate rule's confirmation replaced by ``confirm`` (it is looked up once, then kept)."""
    from guarded_sqlite._analysis.plan_cache import known_safe, plan
    from guarded_sqlite._analysis.trees import Collecting
    from guarded_sqlite._guard import aggregate_check
    from guarded_sqlite._rules import confirmations

    monkeypatch.setattr(aggregate_check, "_AGGREGATE_RULE", [plan, confirm, confirmations, known_safe, Collecting])


@contextmanager
def inner_checks_skipped(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The inner SELECTs are planned, but ``fanout.confirm`` never runs their checks (``plan.scopes``)."""
    from guarded_sqlite._rules.fanout import confirm

    def without_scopes(sql: str, rows: list[Any], plan: Any, *args: Any, **kwargs: Any) -> Any:
        return confirm(sql, rows, dataclasses.replace(plan, scopes=()), *args, **kwargs)

    _rule_with(monkeypatch, without_scopes)
    yield


def rule_off_for(pattern: str) -> Callable[[pytest.MonkeyPatch], Any]:
    """The rule returns None (nothing at risk, no decision) for a statement that matches ``pattern``: the
    shape's check switched off, as c24 was before issue 34."""

    @contextmanager
    def mutation(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        from guarded_sqlite._rules.fanout import confirm

        def unless_matched(sql: str, *args: Any, **kwargs: Any) -> Any:
            return None if re.search(pattern, sql) else confirm(sql, *args, **kwargs)

        _rule_with(monkeypatch, unless_matched)
        yield

    return mutation


MUTATIONS: dict[str, tuple[Callable[[pytest.MonkeyPatch], Any], list[tuple[str, str | None]]]] = {
    "inner SELECTs not planned": (
        inner_selects_not_planned,
        [
            ("minus", None),
            ("scalars", None),
            ("union", None),
            ("outer_in", None),
            ("joinback", None),
            ("derived", None),
            ("cte", None),
            ("scalar", None),
            ("in", "having"),
            ("exists", None),
        ],
    ),
    "inner SELECTs' checks skipped": (inner_checks_skipped, [("minus", None), ("scalars", None), ("union", None)]),
    "CASE label not checked": (rule_off_for(r"CASE WHEN"), [("label", None)]),
    "IN by ranking not checked": (rule_off_for(r" IN \(SELECT .* LIMIT "), [("in", "top")]),
    "window not checked": (rule_off_for(r" OVER \("), [("window", None)]),
}
# Shapes with one inner SELECT, which the suite's other tests cover too: one seed each (time in CI).
ONE_SEED = {("derived", None), ("cte", None), ("scalar", None), ("in", "having"), ("exists", None)}
MUTANTS = [
    pytest.param(name, shape, outer, at, id=f"{name}-{shape}{'-' + outer if outer else ''}-seed{at}")
    for name, (_, shapes) in MUTATIONS.items()
    for shape, outer in shapes
    for at in (SEEDS[:1] if (shape, outer) in ONE_SEED else SEEDS)
]


@pytest.mark.parametrize(("mutation", "shape", "outer", "at"), MUTANTS)
def test_the_oracle_fails_when_a_shape_is_not_checked(
    monkeypatch: pytest.MonkeyPatch, mutation: str, shape: str, outer: str | None, at: int
) -> None:
    @seed(at)
    @settings(QUICK, max_examples=MUTANT_EXAMPLES)
    @given(case=cases("sqlite", shape, outer))
    def oracle(case: Case) -> None:
        on_sqlite(case)

    with MUTATIONS[mutation][0](monkeypatch), pytest.raises(AssertionError):
        oracle()
