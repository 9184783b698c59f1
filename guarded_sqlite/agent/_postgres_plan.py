"""The server's own reading of a model's statement on PostgreSQL, before it runs: the functions its
plan calls (``postgres_plan_problem``), for ``GuardedDatabase``'s call transaction. The statement
check's other half, the names its text holds, is ``lockdown.denied_call_problem``'s."""

from __future__ import annotations

import re
from contextlib import nullcontext
from typing import Any

from ._refusals import EXPLAIN_PREFIX

__all__ = ["postgres_plan_problem"]


def postgres_plan_problem(raw: Any, sql: str, parameters: tuple[Any, ...], *, allow_writes: bool) -> str | None:
    """Why the model's statement may not run, by the server's own reading of it, or None: the plan of
    ``EXPLAIN (VERBOSE, FORMAT JSON)``, run in the call's transaction before the statement, names a
    function the tools refuse (``statements.POSTGRES_DENIED_FUNCTIONS``), in the expressions the plan
    shows (outputs, filters, conditions, function scans, and what views and inlined SQL functions
    expand to). EXPLAIN without ANALYZE parses, rewrites and plans, and runs nothing volatile: the
    planner evaluates immutable calls (and stable ones, for its estimates), and every refused function
    is volatile (checked in pg_proc on PostgreSQL 15).

    The plan does not show every expression (``LIMIT``'s count, a ``VALUES`` list, a window frame's
    offsets), which is why the text itself is searched first (``denied_call_problem``); the plan adds
    what the text reaches without naming it. Sent prepared (the extended protocol), which takes one
    statement only. An error the statement would raise the same way (a syntax error, a missing table)
    propagates; with writes allowed a statement EXPLAIN cannot take (``CREATE``, ``DO``, ...) is
    planned nowhere, so it runs only when it holds none of ``DO``, ``EXPLAIN`` and ``EXECUTE`` (code or a
    statement whose text no check reads)."""
    import psycopg

    from .._analysis.lexing import named_anywhere
    from .._analysis.statements import POSTGRES_DENIED_FUNCTIONS
    from .lockdown import postgres_denial

    explain = EXPLAIN_PREFIX + sql
    try:
        # A savepoint where writes are allowed: a statement EXPLAIN cannot take must not end the call's
        # transaction. Without writes every statement here is a query, and EXPLAIN's error is the query's.
        with raw.transaction() if allow_writes else nullcontext(), raw.cursor() as cursor:
            cursor.execute(explain, parameters or None, prepare=True)
            row = cursor.fetchone()
    except psycopg.errors.SyntaxError:
        if not allow_writes:
            raise
        word = _CODE_WORDS.search(sql)
        if word is None:
            return None
        return (
            f"Refused: this tool does not run a statement with {word.group(0).upper()} in it that the server cannot "
            "plan in advance (DO blocks, EXPLAIN and EXECUTE run code or statements no check reads); send the "
            "statement itself."
        )
    plan = row[0] if row else None
    name = named_anywhere("\n".join(_plan_texts(plan)), POSTGRES_DENIED_FUNCTIONS)
    return None if name is None else postgres_denial(name)


_CODE_WORDS = re.compile(r"\b(?:DO|EXPLAIN|EXECUTE)\b", re.IGNORECASE)
"""Words of statements that run code or another statement: refused in a statement EXPLAIN cannot plan."""


def _plan_texts(value: Any) -> list[str]:
    """Every text of an EXPLAIN JSON plan with its string literals taken out (``'...'``, a quote doubled
    inside; ``"..."`` names kept), so that a literal that merely spells a refused name is not taken for
    a call. An unterminated quote keeps the rest of that text (a raw name such as an alias ``it's``)."""
    if isinstance(value, dict):
        return [text for item in value.values() for text in _plan_texts(item)]
    if isinstance(value, list):
        return [text for item in value for text in _plan_texts(item)]
    if not isinstance(value, str):
        return []
    kept: list[str] = []
    position, end = 0, len(value)
    while position < end:
        quote = min((i for i in (value.find("'", position), value.find('"', position)) if i >= 0), default=end)
        kept.append(value[position:quote])
        if quote == end:
            break
        close = quote + 1
        while True:
            close = value.find(value[quote], close)
            if close < 0 or not value.startswith(value[quote], close + 1):
                break
            close += 2
        if close < 0:  # unterminated: kept whole
            kept.append(value[quote:])
            break
        if value[quote] == '"':
            kept.append(value[quote : close + 1])
        position = close + 1
    return ["".join(kept)]
