"""Where a statement's report goes besides its cursor: the policy's report sink (``on_report``) and
the ``guarded_sqlite`` logger.

Reports are built lazily (``GuardReport.from_state``); ``built`` keeps the last one made in the
process, so a sink and a later ``cursor.guard_report`` of the same statement share one object.

Log levels (``level_of``), one record per statement that is flagged or changed (nothing for healthy
ones). A library is quiet about routine events, so only what a reader of an application's log should act
on goes above ``DEBUG``:

* ``INFO`` when the guard changed the rows (a patch, a rescue candidate, corrected aggregates): what was
  done and why.
* ``WARNING`` when the rows were served unchanged although they repeat what the data shows to be join
  copies: an explosion whose copies P1 counted on the data (``RuleDecision.copies > 0``) but did not
  remove (a rule refused, e.g. on a ``COLLATE``), or an aggregate fan-out confirmed on the data. The
  caller is reading rows several times, or totals that count rows several times, and nothing fixed it.
* ``DEBUG`` for every other flagged statement, which the guard neither changed nor judged a likely bug:
  an empty result, an execution error (it already reached the caller as an exception), an explosion of
  value repeats (legitimate; keys that allow a fan-out the data does not have included), ``unknown``, or
  not analysed (observe mode, the paper preset, a structural refusal). Applications produce these in
  normal work (an empty result is often the right answer), and some show their users every ``INFO``
  record (click-log applications), so they stay out of it.

The logger has a ``NullHandler``, so an application that configured no logging prints nothing. Its
``DEBUG`` records are opt-in: when the first record finds the logger's own level unset (``NOTSET``), it
sets ``INFO``, so an application (or a test) that turns the root logger to ``DEBUG`` does not receive a
record per routine statement; ``logging.getLogger("guarded_sqlite").setLevel(logging.DEBUG)`` asks for
them (as SQLAlchemy keeps its engine's per-statement records off until asked). The
``logging`` module is imported by the first record (``import guarded_sqlite`` stays close to ``import
sqlite3``); the levels below are ``logging``'s numbers.

The message and the structured fields (``record.guarded_sqlite``) show the SQL with its literals
replaced by ``?`` (``rewrite.normalise_literals``; literals can be secrets); the full SQL goes to a
separate ``DEBUG`` record. Normalising imports sqlglot, so it runs only for a record a handler keeps;
no record is made at all when only a ``NullHandler`` would receive it (``_handled``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .report import GuardReport, ReportState, routine_aggregate

if TYPE_CHECKING:
    import logging

_DEBUG, _INFO, _WARNING = 10, 20, 30
_loggers: list[logging.Logger] = []


def _logger() -> logging.Logger:
    if not _loggers:
        import logging

        logger = logging.getLogger("guarded_sqlite")
        logger.addHandler(logging.NullHandler())
        if logger.level == logging.NOTSET:
            # A root at DEBUG is a common debugging setup, and one record per empty result or handled
            # error would bury the application's own; a level the application set stays.
            logger.setLevel(logging.INFO)
        _loggers.append(logger)
    return _loggers[0]


ReportSink = Callable[[GuardReport], object]
"""What ``GuardPolicy.on_report`` takes: called with each statement's report."""

_last: tuple[ReportState | None, GuardReport | None] = (None, None)
"""The last report built in this process, with the state it was built from (one pair, replaced whole)."""


def built(state: ReportState) -> GuardReport:
    """The report of ``state``. A statement repeated with the same facts (a point query by key: one
    healthy row, untimed) gets the report already built for them: reports are immutable, and building
    one costs more than the probe."""
    global _last
    last = _last
    if last[0] == state:
        return last[1]  # type: ignore[return-value]
    report = GuardReport.from_state(state)
    _last = (state, report)
    return report


class _SinkDepth(threading.local):
    inside = False


_depth = _SinkDepth()


def deliver(sink: ReportSink, state: ReportState, cursor: Any) -> None:
    """Call ``sink`` with the statement's report, which becomes ``cursor``'s (so both are one object).
    Whatever the sink raises is logged, never passed on: the statement has already run and its rows
    are the caller's. Statements a sink issues itself (one that stores reports in a table) are not
    delivered back to it, which would never end."""
    if _depth.inside:
        return
    _depth.inside = True
    try:
        report = built(state)
        cursor._self_report = (state, report)
        sink(report)
    except Exception:
        _logger().warning("guarded_sqlite: the report sink raised; the statement is unaffected", exc_info=True)
    finally:
        _depth.inside = False


def level_of(state: ReportState) -> int | None:
    """The level of ``state``'s log record (``logging``'s numbers), or None for no record at all (a
    healthy statement left alone). See the module's docstring for what each level means."""
    if state.action != "none":
        return _INFO
    trigger = state.trigger
    if trigger is None:
        # An aggregate at risk the rule did not check (refused, over budget): routine, for debugging.
        return _DEBUG if any(d.rule == "aggregate" and not routine_aggregate(d) for d in state.decisions) else None
    if trigger == "aggregate_fanout":  # set only with findings confirmed on the data
        return _WARNING
    if trigger == "cartesian_explosion" and _join_copies(state):
        return _WARNING
    return _DEBUG


def _join_copies(state: ReportState) -> bool:
    """Whether an explosion's rows were shown to repeat join copies: P1 counted some on the data (or the
    projection identifies the rows, so every repeat is one). Keys that merely allow a fan-out the data
    does not have, and checks that could not run, are routine."""
    return any(decision.rule == "P1" and decision.copies for decision in state.decisions)


def log_statement(state: ReportState, dialect: str) -> None:
    """The log record of one flagged or changed statement at ``level_of(state)``, and a ``DEBUG`` record
    with the full SQL. Nothing is built (no report, no normalised SQL) for a level no handler takes."""
    level = level_of(state)
    if level is None:
        return
    logger = _logger()
    if logger.isEnabledFor(level) and _handled(logger, level):
        report = built(state)
        fields = structured_fields(report, dialect)
        logger.log(level, _message(report, fields), extra={"guarded_sqlite": fields})
    if not (logger.isEnabledFor(_DEBUG) and _handled(logger, _DEBUG)):
        return
    if state.action != "none":
        logger.debug("guarded_sqlite %s, full SQL: %s -> %s", state.action, state.sql, state.final_sql)
    else:
        logger.debug("guarded_sqlite %s, full SQL: %s", state.trigger, state.sql)


def _handled(logger: logging.Logger, level: int) -> bool:
    """Whether a record at ``level`` would reach a handler other than a ``NullHandler`` (or, with no
    handler at all, ``logging.lastResort``), as ``Logger.callHandlers`` walks the loggers. A record that only
    a ``NullHandler`` would take is not made: the message and its fields cost more than the probe (a
    flagged statement repeated by a dashboard pays it on every execution). A logger filter may act on
    any record, so with one the record is always made."""
    import logging

    if logger.filters:
        return True
    found = False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            found = True
            if level >= handler.level and type(handler) is not logging.NullHandler:
                return True
        if not current.propagate:
            break
        current = current.parent
    last = logging.lastResort
    return not found and last is not None and level >= last.level


def structured_fields(report: GuardReport, dialect: str) -> dict[str, Any]:
    """The report as JSON-ready fields, with the SQL's literals replaced by ``?``."""
    sql = loggable_sql(report.sql, dialect)
    final_sql = sql if report.final_sql == report.sql else loggable_sql(report.final_sql, dialect)
    return {
        "mode": report.mode,
        "preset": report.preset,
        "trigger": report.trigger,
        "action": report.action,
        "sql_normalised": sql,
        "final_sql_normalised": final_sql,
        "rows": report.rows,
        "unique_rows": report.unique_rows,
        "dup_ratio": report.dup_ratio,
        "final_rows": report.final_rows,
        "provenance": report.provenance,
        "provenance_evidence": report.provenance_evidence,
        "decisions": [
            {"rule": decision.rule, "applied": decision.applied, "reason": decision.reason}
            for decision in report.decisions
        ],
        "note": report.note,
        "error": None if report.error is None else redact_quoted(report.error),
        "detect_us": report.detect_us,
        "patch_ms": report.patch_ms,
        "rescue_chosen_index": None if report.rescue is None else report.rescue.chosen_index,
        # Not the written and corrected values: they are the application's data.
        "aggregates": [
            {
                "function": finding.function,
                "argument": loggable_sql(finding.argument, dialect),
                "repeated": list(finding.repeated),
                "repeating": list(finding.repeating),
                "factor": finding.factor,
            }
            for finding in report.aggregates
        ],
    }


def loggable_sql(sql: str, dialect: str = "sqlite") -> str:
    """``sql`` without its literals, as logs and the pytest plugin show it; past the parse bound not even
    that (tokenizing a megabyte of SQL for a log line would cost seconds, and no reader wants the line)."""
    from ._analysis.rewrite import MAX_PARSED_CHARS, normalise_literals

    if len(sql) > MAX_PARSED_CHARS:
        return f"<SQL not shown: {len(sql)} characters>"
    return normalise_literals(sql, dialect)


def _message(report: GuardReport, fields: dict[str, Any]) -> str:
    sql = fields["sql_normalised"]
    if report.action != "none":
        text = f"guarded_sqlite {report.action}: {sql} -> {fields['final_sql_normalised']}"
    elif report.trigger == "exec_error":
        text = f"guarded_sqlite exec_error ({fields['error']}): {sql}"
    elif report.trigger == "empty_result":
        text = f"guarded_sqlite empty_result: {sql}"
    elif report.trigger == "aggregate_fanout":
        inflated = "; ".join(
            f"{f['function']}({f['argument']}) counts {', '.join(f['repeated'])} once per row of "
            f"{', '.join(f['repeating'])}" + ("" if f["factor"] is None else f" (factor {f['factor']:.3g})")
            for f in fields["aggregates"]
        )
        text = f"guarded_sqlite aggregate_fanout left unchanged: {sql} ({inflated})"
    elif report.trigger is None:
        unchecked = next((d.reason for d in report.decisions if d.rule == "aggregate"), "")
        text = f"guarded_sqlite aggregate not checked: {sql} ({unchecked})"
    else:
        text = (
            f"guarded_sqlite {report.trigger} left unchanged ({report.rows} rows, {report.unique_rows} distinct): {sql}"
        )
        refusal = next((d.reason for d in report.decisions if d.rule == "P1" and not d.applied), None)
        if refusal is not None:
            text += f" (P1 not applied: {refusal})"
    if report.provenance is not None:
        text += f" (provenance {report.provenance}: {report.provenance_evidence})"
    return text


_QUOTED = r"'(?:[^']|'')*'?|\"(?:[^\"]|\"\")*\"?"


def redact_quoted(message: str) -> str:
    r"""An error message with every quoted span replaced by ``?``: a syntax error quotes the token it
    stopped at, which may be one of the SQL's literals.

    >>> redact_quoted("unrecognized token: \"'tok_9f8e\"")
    'unrecognized token: ?'
    >>> redact_quoted("no such table: orders")
    'no such table: orders'
    """
    return re.sub(_QUOTED, "?", message)
