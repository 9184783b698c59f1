"""Closed-loop measurement: does one revision that follows ``GuardReport.feedback()`` fix the SQL it was given?

An agent that queries through the library (for instance through its MCP server) sees, for a flagged statement,
the feedback's few lines and their "Next step: ..." advice, and may rewrite its SQL once. This script stands in
for the agent with a deterministic *scripted reviser* and measures what that one revision is worth, next to the
rows the guard itself would serve.

For every prediction (paired with its gold query by position, as ``guarded-sqlite eval`` pairs them):

1. the prediction runs through ``guarded_sqlite.connect(path, guard="patch")`` (the applications' default
   preset; ``--feedback-guard text_to_sql`` for the one the agent tools use) and ``cursor.guard_report`` is read;
2. where the report is flagged ``cartesian_explosion`` or ``aggregate_fanout`` (or, under ``text_to_sql``, not
   flagged but patched below the threshold, which has feedback too), the reviser gets the question,
   the SQL and ``report.feedback()`` (never the gold, the rows or the report's fields) and returns one revised
   SQL or None (see ``revise``); execution errors and empty results are counted, not revised;
3. the raw prediction, the revised SQL and the gold run on plain ``sqlite3`` (read-only), and the rows the
   ``"text_to_sql"`` preset serves for the raw prediction are taken as the guard's own repair;
4. each side is scored against the gold with the evaluation package's Set-EX / Multiset-EX
   (``guarded_sqlite.evaluation.metrics``).

The reviser is a handful of pure functions (question, SQL text, feedback text -> revised SQL or None) so that
``tests/evaluation/test_closed_loop.py`` can pin each rule on fixtures. Its rules, keyed on the feedback's wording:

* "Next step: add DISTINCT to the outer SELECT, or test the joined table with EXISTS / IN (SELECT ...)" (a join
  amplification): add DISTINCT with the library's own text edit (``guarded_sqlite._analysis.rewrite.inject_distinct``,
  whose exemptions it inherits: LIMIT, GROUP BY, outer aggregates, compound queries). ``--explosion-fix
  semijoin`` tries the other suggestion first: the tables the evidence says fan out become an ``EXISTS``.
* "Next step: if each answer should appear once, add DISTINCT; the repeats may be meant." (value repeats, or a
  join the keys say cannot multiply): the reviser decides from the question alone. Policy ``asked`` (default):
  add DISTINCT only when the question says *distinct*, *different* or *unique*; ``always`` and ``never`` are the
  two extremes, measured alongside.
* "Next step: aggregate before joining X ..., or test X with EXISTS / IN (SELECT ...)" (an aggregate fan-out):
  turn the joins with the named tables into one ``EXISTS (SELECT 1 FROM X ... WHERE ...)`` holding the join
  conditions and WHERE conjuncts that mention them. Only when their columns appear nowhere else (select list,
  GROUP BY, HAVING, ORDER BY), every join is inner and every column of the outer query is qualified; otherwise
  the SQL is left unrevised.

Run on Spider dev (the data README is ``/work/shared/data/spider_dev/README.md``)::

    D=/work/shared/data/spider_dev
    .venv/bin/python benchmarks/closed_loop.py --db-root $D/database --gold $D/dev.json \\
        --pred $D/predictions/DAIL-SQL+GPT-4.txt --gold-as-pred --exclude-db wta_1 --markdown out.md

or on the sample shipped in the package, offline: ``.venv/bin/python benchmarks/closed_loop.py --sample``.
Databases are opened read-only (URI ``mode=ro``), and SQL that is not a read-only query is never executed.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

import guarded_sqlite
from guarded_sqlite._analysis.rewrite import inject_distinct, is_read_only_query
from guarded_sqlite.evaluation import metrics
from guarded_sqlite.evaluation.loaders import Pair, exclude_databases, load_pairs, locate_databases
from guarded_sqlite.evaluation.sample import sample_inputs
from guarded_sqlite.policy import GuardPreset
from guarded_sqlite.report import GuardReport

# --------------------------------------------------------------------------------------------------------------
# The scripted reviser: pure functions of (question, SQL text, feedback text).
# --------------------------------------------------------------------------------------------------------------

# The feedback's stable wording (guarded_sqlite/report.py, pinned by tests/rules/test_feedback.py). The reviser keys on
# these phrases and nothing else, as an agent reading the text would.
NEXT_DISTINCT = "Next step: add DISTINCT to the outer SELECT"
NEXT_MAYBE_MEANT = "Next step: if each answer should appear once, add DISTINCT; the repeats may be meant."
NEXT_AGGREGATE = "Next step: aggregate before joining "
_AGGREGATE_TAIL = " (a subquery grouped by the join key)"

EXPLOSION_FIXES = ("distinct", "semijoin")
REPEATS_POLICIES = ("asked", "always", "never")
FLAGGED_TRIGGERS = ("cartesian_explosion", "aggregate_fanout")

# Words with which a question asks for each answer once. Kept to three on purpose: "each", "every" and "list"
# are as often about one row per line as about one row per entity.
_ASKS_DISTINCT = re.compile(r"\b(distinct|different|unique)\b", re.IGNORECASE)
# "o (orders) fans out c (customers) (...)": the alias before " fans out ", after the start or a "; ".
_FANS_OUT = re.compile(r"(?:^|; )([^\s;()]+)(?: \([^()]*\))? fans out ")
_TRUNCATED = re.compile(r"\band \d+ more\b")


class Revision(NamedTuple):
    """The reviser's answer for one flagged statement."""

    sql: str | None
    """The revised SQL, or None when the reviser leaves the statement as written."""

    rule: str
    """Which rule answered: ``distinct``, ``distinct_if_asked``, ``semijoin``, ``aggregate_semijoin``, ``none``."""

    reason: str
    """What the rule did, or why it did nothing."""


@dataclass(frozen=True)
class ReviserConfig:
    """The reviser's two policy choices."""

    explosion_fix: str = "distinct"
    """For a join amplification: ``distinct`` (the advice's first option) or ``semijoin`` (EXISTS first, DISTINCT
    if the semi-join cannot be built)."""

    repeats: str = "asked"
    """For "the repeats may be meant": ``asked`` (DISTINCT when the question asks for it), ``always``, ``never``."""

    @property
    def name(self) -> str:
        return f"{self.explosion_fix}/{self.repeats}"


def asks_for_distinct(question: str | None) -> bool:
    """Whether the question asks for each answer once, in so many words.

    >>> asks_for_distinct("List the different countries."), asks_for_distinct("In which years ...?")
    (True, False)
    """
    return bool(question) and _ASKS_DISTINCT.search(question or "") is not None


def add_distinct(sql: str) -> Revision:
    """DISTINCT on the outermost SELECT, through the library's own text edit (and its exemptions)."""
    rewrite = inject_distinct(sql)
    return Revision(rewrite.sql, "distinct", rewrite.reason)


def fanning_tables(feedback: str) -> tuple[str, ...] | None:
    """The aliases the explosion evidence says fan out the answer ("X fans out Y"), in order; None when there is
    no such evidence or it was cut short ("and N more")."""
    why = next((line for line in feedback.splitlines() if line.startswith("Why (")), None)
    if why is None or _TRUNCATED.search(why):
        return None
    evidence = why.split("): ", 1)[1] if "): " in why else why
    aliases = tuple(dict.fromkeys(_FANS_OUT.findall(evidence)))
    return aliases or None


def repeating_tables(feedback: str) -> tuple[str, ...] | None:
    """The aliases an aggregate fan-out's next step names ("aggregate before joining o (orders), i (items) ...")."""
    line = next((line for line in feedback.splitlines() if line.startswith(NEXT_AGGREGATE)), None)
    if line is None or _AGGREGATE_TAIL not in line:
        return None
    listed = line[len(NEXT_AGGREGATE) : line.index(_AGGREGATE_TAIL)]
    # Items are "alias (table)" or a bare table name; the alias is what the SQL's columns are qualified with.
    aliases = tuple(dict.fromkeys(item.split(" (", 1)[0].strip() for item in listed.split(", ")))
    return aliases if all(aliases) else None


def _conjuncts(node: exp.Expr | None) -> list[exp.Expr]:
    if node is None:
        return []
    if isinstance(node, exp.Paren) and isinstance(node.this, exp.And):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return [*_conjuncts(node.left), *_conjuncts(node.right)]
    return [node]


def _mentions(node: exp.Expr, names: set[str]) -> bool:
    # At any depth, subqueries included: a conjunct wrongly thought to mention the semi-joined tables only moves
    # into the EXISTS, which keeps the meaning; one wrongly thought not to would change it.
    return any(column.table.lower() in names for column in node.find_all(exp.Column))


def _outer_columns(node: exp.Expr) -> Iterator[exp.Column]:
    """Column references of the outer query's own scope (not inside subqueries)."""
    for child in node.walk(prune=lambda n: n is not node and isinstance(n, (exp.Select, exp.Subquery))):
        if isinstance(child, exp.Column):
            yield child


def semi_join(sql: str, aliases: Sequence[str], rule: str = "semijoin") -> Revision:
    """Replace the inner joins with the tables named by ``aliases`` by one ``EXISTS`` over them.

    For ``SELECT f(K) FROM K, S WHERE C_K AND C_S`` (S the named tables, C_S the join conditions and WHERE
    conjuncts that mention S) the result is ``SELECT f(K) FROM K WHERE C_K AND EXISTS (SELECT 1 FROM S WHERE
    C_S)``: each row of K once instead of once per match in S. That equality needs S's columns to be used only in
    C_S and every join to be inner, so anything else is refused.

    >>> semi_join("SELECT avg(h.grade) FROM highschooler AS h JOIN friend AS f ON h.id = f.student_id", ["f"]).sql
    'SELECT AVG(h.grade) FROM highschooler AS h WHERE EXISTS(SELECT 1 FROM friend AS f WHERE h.id = f.student_id)'
    """

    def refuse(reason: str) -> Revision:
        return Revision(None, rule, reason)

    try:
        trees = sqlglot.parse(sql, read="sqlite")
    except SqlglotError:
        return refuse("does not parse")
    if len(trees) != 1 or not isinstance(trees[0], exp.Select):
        return refuse("not a single SELECT (compound or other statement)")
    select = trees[0].copy()
    from_ = select.args.get("from_")
    joins: list[exp.Join] = list(select.args.get("joins") or [])
    if from_ is None or not joins:
        return refuse("no join to turn into a semi-join")
    for join in joins:
        if join.args.get("side") or join.args.get("using") or join.args.get("method"):
            return refuse("has an outer, NATURAL or USING join")
        if (join.args.get("kind") or "INNER").upper() not in ("INNER", "CROSS"):
            return refuse(f"has a {join.args['kind']} join")
    sources = [from_.this, *(join.this for join in joins)]
    names = [source.alias_or_name.lower() for source in sources]
    if not all(names) or len(set(names)) != len(names):
        return refuse("a table in FROM has no name, or two share one")
    wanted = {alias.lower() for alias in aliases}
    missing = sorted(wanted - set(names))
    if missing:
        return refuse(f"the feedback names {', '.join(missing)}, which the FROM clause does not")
    keep = [index for index, name in enumerate(names) if name not in wanted]
    if not keep:
        return refuse("every table in FROM is one to semi-join")
    # Unqualified columns could belong to any table (the reviser has no schema); projection aliases are fine.
    projected = {e.alias.lower() for e in select.expressions if e.alias}
    for column in _outer_columns(select):
        if not column.table and column.name.lower() not in projected:
            return refuse(f"unqualified column {column.name}: cannot tell which table it belongs to")
    for key, value in select.args.items():
        if key in ("from_", "joins", "where", "with_") or value is None:
            continue
        for part in value if isinstance(value, list) else [value]:
            if not isinstance(part, exp.Expression):
                continue
            if isinstance(part, exp.Star) or (isinstance(part, exp.Column) and isinstance(part.this, exp.Star)):
                if isinstance(part, exp.Star) or part.table.lower() in wanted:
                    return refuse("the select list has a * that includes the tables to semi-join")
            if any(column.table.lower() in wanted for column in _outer_columns(part)):
                return refuse(f"columns of {', '.join(sorted(wanted))} are used outside the join and WHERE")
    ons: list[exp.Expr | None] = [None, *(join.args.get("on") for join in joins)]
    moved: list[exp.Expr] = []
    kept: list[tuple[exp.Expr, list[exp.Expr]]] = []
    for index, (source, on) in enumerate(zip(sources, ons, strict=True)):
        parts = _conjuncts(on)
        if index in keep:
            kept.append((source, [c for c in parts if not _mentions(c, wanted)]))
            moved.extend(c for c in parts if _mentions(c, wanted))
        else:
            moved.extend(parts)
    where = select.args.get("where")
    outer_where: list[exp.Expr] = []
    for conjunct in _conjuncts(where.this if where is not None else None):
        (moved if _mentions(conjunct, wanted) else outer_where).append(conjunct)
    semi_sources = [sources[index] for index in range(len(sources)) if index not in keep]
    inner = exp.select("1").from_(semi_sources[0].copy())
    for source in semi_sources[1:]:
        inner = inner.join(source.copy(), join_type="cross")
    if moved:
        inner = inner.where(exp.and_(*(c.copy() for c in moved)))
    (first, first_on), rest = kept[0], kept[1:]
    # The first kept table becomes FROM; its join conditions (if it was joined) go to WHERE.
    outer_where = [*first_on, *outer_where]
    select.set("from_", exp.From(this=first.copy()))
    new_joins = []
    for source, on_parts in rest:
        join = exp.Join(this=source.copy())
        if on_parts:
            join.set("on", exp.and_(*(c.copy() for c in on_parts)))
        else:
            join.set("kind", "CROSS")
        new_joins.append(join)
    select.set("joins", new_joins or None)
    select.set("where", exp.Where(this=exp.and_(*(c.copy() for c in outer_where), exp.Exists(this=inner))))
    revised = select.sql(dialect="sqlite")
    try:
        sqlglot.parse_one(revised, read="sqlite")
    except SqlglotError:
        return refuse("the rewritten SQL does not parse")
    return Revision(revised, rule, f"joins with {', '.join(aliases)} turned into EXISTS")


def revise(question: str | None, sql: str, feedback: str, config: ReviserConfig = ReviserConfig()) -> Revision:
    """One revision of ``sql`` following ``feedback``'s next step, or ``Revision(None, ...)``.

    >>> revise("Which cities?", "SELECT city FROM t", "").reason
    'the feedback has no next step the reviser acts on'
    """
    if NEXT_MAYBE_MEANT in feedback:
        wanted = config.repeats == "always" or (config.repeats == "asked" and asks_for_distinct(question))
        if not wanted:
            return Revision(None, "distinct_if_asked", f"repeats left as written (policy {config.repeats})")
        return add_distinct(sql)._replace(rule="distinct_if_asked")
    if NEXT_DISTINCT in feedback:
        if config.explosion_fix == "semijoin":
            aliases = fanning_tables(feedback)
            if aliases is not None:
                revision = semi_join(sql, aliases)
                if revision.sql is not None:
                    return revision
        return add_distinct(sql)
    if NEXT_AGGREGATE in feedback:
        aliases = repeating_tables(feedback)
        if aliases is None:
            return Revision(None, "aggregate_semijoin", "could not read the tables from the next step")
        return semi_join(sql, aliases, rule="aggregate_semijoin")
    return Revision(None, "none", "the feedback has no next step the reviser acts on")


# --------------------------------------------------------------------------------------------------------------
# The measurement.
# --------------------------------------------------------------------------------------------------------------

SIDES = ("before", "after", "guard")
"""The raw prediction, after the one revision, and the rows the ``text_to_sql`` preset serves."""
CATEGORIES = ("healthy", "flagged", "exec_error", "empty_result", "refused")
"""What the feedback guard (``"patch"`` unless ``--feedback-guard``) made of a prediction. ``refused``: not a
read-only query by the library's token test (``is_read_only_query``), so never executed: writes, and SQL the
tokenizer cannot read as a query (``SELEC ...``)."""


@dataclass
class PairOutcome:
    """One prediction's path through the loop."""

    index: int
    db_id: str
    question: str | None
    pred_sql: str
    category: str
    """``refused`` (not a read-only query), ``exec_error``, ``empty_result``, ``flagged`` or ``healthy``."""
    trigger: str | None = None
    provenance: str | None = None
    feedback: str = ""
    rule: str | None = None
    revised_sql: str | None = None
    reason: str | None = None
    revision_error: str | None = None
    verdicts: dict[str, tuple[bool, bool]] = field(default_factory=dict)
    """Per side: (Set-EX, Multiset-EX) against the gold."""
    variants: dict[str, tuple[bool, bool]] = field(default_factory=dict)
    """Flagged pairs only: the after-revision verdicts under each reviser configuration."""
    variant_revised: dict[str, bool] = field(default_factory=dict)
    """Flagged pairs only: whether each reviser configuration revised the SQL."""


_Guarded = guarded_sqlite.GuardedSQLiteConnection


class _Databases:
    """Per database: a plain read-only connection and the two guarded ones, opened once."""

    def __init__(self, paths: dict[str, Path], stack: ExitStack, timeout: float, feedback_guard: str) -> None:
        self.paths, self.stack, self.timeout, self.feedback_guard = paths, stack, timeout, feedback_guard
        self.opened: dict[str, tuple[sqlite3.Connection, _Guarded, _Guarded]] = {}

    def get(self, db_id: str) -> tuple[sqlite3.Connection, _Guarded, _Guarded]:
        if db_id not in self.opened:
            # mode=ro: the second fence after is_read_only_query; nothing this script runs can change a file.
            uri = self.paths[db_id].resolve().as_uri() + "?mode=ro"
            plain = sqlite3.connect(uri, uri=True)
            patch = guarded_sqlite.connect(uri, uri=True, guard=cast(GuardPreset, self.feedback_guard))
            repair = guarded_sqlite.connect(uri, uri=True, guard="text_to_sql")
            for con in (plain, patch, repair):
                self.stack.callback(con.close)
            self.opened[db_id] = (plain, patch, repair)
        return self.opened[db_id]

    def run_plain(self, db_id: str, sql: str) -> tuple[list[Any] | None, str | None]:
        """Rows of ``sql`` on the unguarded connection, or (None, error); interrupted after ``timeout`` s."""
        con = self.get(db_id)[0]
        deadline = time.monotonic() + self.timeout
        con.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            return con.execute(sql).fetchall(), None
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as error:
            return None, f"{type(error).__name__}: {error}"
        finally:
            con.set_progress_handler(None, 0)


def _run_guarded(con: _Guarded, sql: str) -> tuple[list[Any] | None, GuardReport]:
    cur = con.cursor()
    try:
        cur.execute(sql)
        rows: list[Any] | None = cur.fetchall()
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError):
        rows = None
    report = cur.guard_report
    assert report is not None  # execute() always leaves one, failures included
    return rows, report


def measure_pairs(
    pairs: Sequence[Pair], paths: dict[str, Path], config: ReviserConfig, timeout: float, feedback_guard: str = "patch"
) -> tuple[list[PairOutcome], list[int]]:
    """Every pair through the loop; returns the outcomes and the indexes of pairs whose gold failed."""
    variants = [ReviserConfig(fix, policy) for fix in EXPLOSION_FIXES for policy in REPEATS_POLICIES]
    outcomes: list[PairOutcome] = []
    gold_failures: list[int] = []
    gold_cache: dict[tuple[str, str], metrics.GoldRows | None] = {}
    with ExitStack() as stack:
        dbs = _Databases(paths, stack, timeout, feedback_guard)
        for pair in pairs:
            key = (pair.db_id, pair.gold_sql)
            if key not in gold_cache:
                rows, _ = dbs.run_plain(pair.db_id, pair.gold_sql)
                gold_cache[key] = None if rows is None else metrics.GoldRows(rows)
            gold = gold_cache[key]
            if gold is None:
                gold_failures.append(pair.index)
                continue
            outcomes.append(_measure_pair(pair, gold, dbs, config, variants))
    return outcomes, gold_failures


def _score(gold: metrics.GoldRows, rows: list[Any] | None) -> tuple[bool, bool]:
    return (False, False) if rows is None else gold.verdicts(rows)


def _measure_pair(
    pair: Pair, gold: metrics.GoldRows, dbs: _Databases, config: ReviserConfig, variants: Sequence[ReviserConfig]
) -> PairOutcome:
    outcome = PairOutcome(pair.index, pair.db_id, pair.question, pair.pred_sql, "healthy")
    if not is_read_only_query(pair.pred_sql):
        outcome.category = "refused"
        outcome.verdicts = dict.fromkeys(SIDES, (False, False))
        return outcome
    _, patch, repair = dbs.get(pair.db_id)
    raw_rows, _ = dbs.run_plain(pair.db_id, pair.pred_sql)
    _, report = _run_guarded(patch, pair.pred_sql)
    guard_rows, _ = _run_guarded(repair, pair.pred_sql)
    before = _score(gold, raw_rows)
    outcome.verdicts = {"before": before, "after": before, "guard": _score(gold, guard_rows)}
    outcome.trigger, outcome.provenance = report.trigger, report.provenance
    if report.trigger in ("exec_error", "empty_result"):
        outcome.category = report.trigger
        return outcome
    feedback = report.feedback()
    # Under "text_to_sql" a result below tau_inject can be patched without a trigger; its feedback still says what
    # was done and what to do next, so it is a report an agent would act on.
    acted = report.trigger is None and report.action != "none" and feedback
    if report.trigger not in FLAGGED_TRIGGERS and not acted:
        return outcome
    outcome.category = "flagged"
    outcome.trigger = report.trigger or f"none+{report.action}"
    outcome.feedback = feedback
    cache: dict[str | None, tuple[bool, bool]] = {None: before}
    for variant in [config, *variants]:
        revision = revise(pair.question, pair.pred_sql, outcome.feedback, variant)
        sql = revision.sql
        if sql is not None and not is_read_only_query(sql):
            sql = None  # never happens with these rules; the fence stays in case one is added
        if sql not in cache:
            rows, error = dbs.run_plain(pair.db_id, sql) if sql is not None else (None, None)
            cache[sql] = _score(gold, rows)
            if variant is config:
                outcome.revision_error = error
        if variant is config:
            outcome.rule, outcome.revised_sql, outcome.reason = revision.rule, sql, revision.reason
            outcome.verdicts["after"] = cache[sql]
        else:
            outcome.variants[variant.name] = cache[sql]
            outcome.variant_revised[variant.name] = sql is not None
    return outcome


def _side_scores(outcomes: Sequence[PairOutcome], side: str) -> dict[str, Any]:
    n = len(outcomes)
    set_ok = sum(o.verdicts[side][0] for o in outcomes)
    multiset_ok = sum(o.verdicts[side][1] for o in outcomes)
    return {
        "set_correct": set_ok,
        "multiset_correct": multiset_ok,
        "set_ex": metrics.percent(set_ok, n),
        "multiset_ex": metrics.percent(multiset_ok, n),
    }


def _changes(before: Sequence[tuple[bool, bool]], after: Sequence[tuple[bool, bool]]) -> dict[str, int]:
    counts = metrics.fix_break((b[0], b[1], a[0], a[1]) for b, a in zip(before, after, strict=True))
    return {
        "set_fix": counts.set_fix,
        "set_break": counts.set_break,
        "multiset_fix": counts.fix,
        "multiset_break": counts.break_,
    }


def _subset_summary(outcomes: Sequence[PairOutcome]) -> dict[str, Any]:
    before = [o.verdicts["before"] for o in outcomes]
    return {
        "n": len(outcomes),
        "scores": {side: _side_scores(outcomes, side) for side in SIDES},
        "changes": {side: _changes(before, [o.verdicts[side] for o in outcomes]) for side in ("after", "guard")},
    }


def summarise(
    label: str, outcomes: Sequence[PairOutcome], gold_failures: Sequence[int], excluded: int
) -> dict[str, Any]:
    """The per-file figures: counts, then scores and fixes/breaks on the flagged subset and on all pairs."""
    categories = Counter(o.category for o in outcomes)
    flagged = [o for o in outcomes if o.category == "flagged"]
    revised = [o for o in flagged if o.revised_sql is not None]
    variant_names = list(flagged[0].variants) if flagged else []
    variants = {}
    for name in variant_names:
        after = [o.variants[name] for o in flagged]
        before = [o.verdicts["before"] for o in flagged]
        variants[name] = {
            "revised": sum(1 for o in flagged if o.variant_revised[name]),
            "set_correct": sum(a[0] for a in after),
            "multiset_correct": sum(a[1] for a in after),
            **_changes(before, after),
        }
    return {
        "label": label,
        "n": len(outcomes),
        "excluded_pairs": excluded,
        "gold_failures": len(gold_failures),
        "categories": {name: categories.get(name, 0) for name in CATEGORIES},
        "flagged_by_trigger": dict(Counter(o.trigger for o in flagged)),
        "revised": len(revised),
        "revised_by_rule": dict(Counter(o.rule for o in revised)),
        "unrevised_reasons": dict(Counter(f"{o.rule}: {o.reason}" for o in flagged if o.revised_sql is None)),
        "revision_errors": sum(1 for o in revised if o.revision_error is not None),
        "flagged": _subset_summary(flagged),
        "all": _subset_summary(outcomes),
        "variants": variants,
        "pairs": [asdict(o) for o in flagged],
    }


# --------------------------------------------------------------------------------------------------------------
# Rendering and the command line.
# --------------------------------------------------------------------------------------------------------------

GOLD_LABEL = "gold as prediction"


def _cell(scores: dict[str, Any], metric: str) -> str:
    value = scores[metric]
    count = scores["set_correct" if metric == "set_ex" else "multiset_correct"]
    return "-" if value is None else f"{value:.2f} ({count})"


def _fix_break(changes: dict[str, int], metric: str) -> str:
    return f"+{changes[f'{metric}_fix']}/−{changes[f'{metric}_break']}"


def render_markdown(result: dict[str, Any]) -> str:
    """The report: inputs, counts, scores with fixes/breaks, reviser variants and the flagged pairs."""
    files = result["files"]
    lines = [
        "# Closed loop: one scripted revision after the guard's feedback",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Machine: {result['machine']}. Reviser: `{result['reviser']}` (explosion fix / repeats policy). "
        f"Excluded databases: {', '.join(result['excluded_db_ids']) or 'none'}. Wall time {result['wall_s']:.1f} s.",
        "",
        "Before = the raw prediction on plain sqlite3; after = the one revision (the raw prediction where the",
        'reviser left it); guard = the rows `guard="text_to_sql"` serves for the raw prediction. Fix/break =',
        "pairs going wrong→right / right→wrong against before. Flagged = `cartesian_explosion` or",
        f'`aggregate_fanout` under `guard="{result["feedback_guard"]}"` (under `text_to_sql` also a result it',
        "patched without a trigger, trigger shown as `none+<action>`).",
        "",
        "## Counts",
        "",
        "| predictions | pairs | healthy | exec error | empty | refused | flagged (by trigger) | revised "
        "(by rule) | revision failed |",
        "|---|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for f in files:
        c, by = f["categories"], f["flagged_by_trigger"]
        rules = ", ".join(f"{rule} {count}" for rule, count in sorted(f["revised_by_rule"].items())) or "-"
        lines.append(
            f"| {f['label']} | {f['n']} | {c['healthy']} | {c['exec_error']} | {c['empty_result']} | {c['refused']} "
            f"| {c['flagged']} ({', '.join(f'{t} {k}' for t, k in sorted(by.items())) or '-'}) "
            f"| {f['revised']} ({rules}) | {f['revision_errors']} |"
        )
    lines += [
        "",
        "## Scores",
        "",
        "Cells: percent (pairs). Fix/break as `+fixes/−breaks`, Set-EX then Multiset-EX.",
        "",
        "| predictions | subset | n | Set-EX before | after | guard | Multiset-EX before | after | guard "
        "| revision fix/break Set, Multiset | guard fix/break Set, Multiset |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for f in files:
        for subset in ("flagged", "all"):
            s = f[subset]
            sc, ch = s["scores"], s["changes"]
            lines.append(
                f"| {f['label']} | {subset} | {s['n']} | "
                + " | ".join(_cell(sc[side], "set_ex") for side in SIDES)
                + " | "
                + " | ".join(_cell(sc[side], "multiset_ex") for side in SIDES)
                + f" | {_fix_break(ch['after'], 'set')}, {_fix_break(ch['after'], 'multiset')}"
                + f" | {_fix_break(ch['guard'], 'set')}, {_fix_break(ch['guard'], 'multiset')} |"
            )
    lines += [
        "",
        "## Reviser variants (flagged pairs)",
        "",
        "The same flagged pairs under each reviser configuration: revised, correct after the revision, fix/break.",
        "",
        "| predictions | reviser | revised | Set-EX after | Multiset-EX after | fix/break Set | fix/break Multiset |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for f in files:
        for name, v in f["variants"].items():
            lines.append(
                f"| {f['label']} | `{name}` | {v['revised']} | {v['set_correct']} | {v['multiset_correct']} "
                f"| {_fix_break(v, 'set')} | {_fix_break(v, 'multiset')} |"
            )
    lines += [
        "",
        "## Flagged pairs",
        "",
        "Verdicts as Set-EX/Multiset-EX (1 = right).",
        "",
        "| predictions | # | trigger (provenance) | rule | revised | before | after | guard | reason |",
        "|---|---:|---|---|---|---|---|---|---|",
    ]
    for f in files:
        for p in f["pairs"]:
            v = {side: "/".join(str(int(x)) for x in p["verdicts"][side]) for side in SIDES}
            trigger = p["trigger"] + (f" ({p['provenance']})" if p["provenance"] else "")
            lines.append(
                f"| {f['label']} | {p['index']} | {trigger} | {p['rule']} | {'yes' if p['revised_sql'] else 'no'} "
                f"| {v['before']} | {v['after']} | {v['guard']} | {p['reason']} |"
            )
    return "\n".join(lines) + "\n"


def _machine() -> str:
    return (
        f"{platform.system()} {platform.machine()}, Python {platform.python_version()}, SQLite "
        f"{sqlite3.sqlite_version}, sqlglot {getattr(sqlglot, '__version__', '?')}"
    )


def run(
    db_root: Path,
    gold: Path,
    preds: Sequence[Path],
    gold_as_pred: bool,
    exclude_db: Sequence[str],
    config: ReviserConfig,
    timeout: float,
    feedback_guard: str = "patch",
) -> dict[str, Any]:
    """Measure each prediction file (and the gold fed back as predictions); the figures as a JSON-able dict."""
    from guarded_sqlite.evaluation.loaders import load_gold

    inputs: list[tuple[str, Any]] = [(Path(pred).stem, pred) for pred in preds]
    if gold_as_pred:
        inputs.append((GOLD_LABEL, [item.sql for item in load_gold(gold)]))
    files = []
    for label, pred in inputs:
        pairs = load_pairs(gold, pred)
        pairs, excluded = exclude_databases(pairs, exclude_db)
        paths = locate_databases(db_root, (pair.db_id for pair in pairs))
        print(f"closed loop: {label}: {len(pairs)} pairs", file=sys.stderr)
        outcomes, gold_failures = measure_pairs(pairs, paths, config, timeout, feedback_guard)
        files.append(summarise(label, outcomes, gold_failures, excluded))
    return {
        "reviser": config.name,
        "feedback_guard": feedback_guard,
        "excluded_db_ids": sorted(exclude_db),
        "files": files,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-root", type=Path, help="folder holding <db_id>/<db_id>.sqlite")
    parser.add_argument("--gold", type=Path, help="gold questions (Spider/BIRD dev.json or gold.sql)")
    parser.add_argument("--pred", type=Path, action="append", default=[], help="prediction file (repeatable)")
    parser.add_argument("--gold-as-pred", action="store_true", help="also feed the gold queries back as predictions")
    parser.add_argument("--exclude-db", action="append", default=[], help="db_id to leave out (repeatable)")
    parser.add_argument("--sample", action="store_true", help="run on the sample shipped in the package instead")
    parser.add_argument("--explosion-fix", choices=EXPLOSION_FIXES, default="distinct")
    parser.add_argument("--repeats", choices=REPEATS_POLICIES, default="asked")
    parser.add_argument(
        "--feedback-guard",
        choices=("patch", "text_to_sql"),
        default="patch",
        help="preset whose report the reviser reads (default patch, the applications' preset; the agent tools "
        "use text_to_sql)",
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per plain query (default 5)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every figure and flagged pair as JSON")
    parser.add_argument("--markdown", type=Path, metavar="OUT", help="write the Markdown report here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = ReviserConfig(args.explosion_fix, args.repeats)
    started = time.perf_counter()
    with ExitStack() as stack:
        if args.sample:
            sample = stack.enter_context(sample_inputs())
            db_root, gold, preds = sample.db_root, sample.gold, [sample.pred, *args.pred]
        else:
            if args.db_root is None or args.gold is None or not (args.pred or args.gold_as_pred):
                parser.error("give --db-root, --gold and --pred (or --gold-as-pred), or --sample")
            db_root, gold, preds = args.db_root, args.gold, args.pred
        result = run(
            db_root, gold, preds, args.gold_as_pred, args.exclude_db, config, args.timeout, args.feedback_guard
        )
    result["wall_s"] = round(time.perf_counter() - started, 3)
    result["machine"] = _machine()
    result["command"] = "python benchmarks/closed_loop.py " + " ".join(sys.argv[1:] if argv is None else argv)
    markdown = render_markdown(result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.markdown is not None:
        args.markdown.write_text(markdown, encoding="utf-8")
    sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
