"""``AggregateFinding``: one value aggregate a join inflated, as ``GuardReport.aggregates`` lists it.

Kept out of ``report`` so that ``import guarded_sqlite`` does not build it: only the aggregate fan-out
rule (``guarded_sqlite._rules.fanout``) makes findings.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class AggregateFinding:
    """One value aggregate a join inflated on this statement's data (``trigger == "aggregate_fanout"``)."""

    function: str
    """``"SUM"``, ``"AVG"``, ``"TOTAL"`` or ``"GROUP_CONCAT"``."""

    argument: str
    """The aggregate's argument, as SQL."""

    repeated: tuple[str, ...]
    """The tables the argument reads, whose rows the join repeats (``alias (table)``)."""

    repeating: tuple[str, ...]
    """The tables whose rows repeat them."""

    written: object
    """The value the query as written computed, in the first row where it differs from the corrected
    one; None when the rows cannot be matched up (the aggregate is not a select item of its own)."""

    corrected: object
    """The value with each row of ``repeated`` counted once per group, in that row."""

    factor: float | None
    """Sum of the written values over the sum of the corrected ones, across the rows (numeric only)."""

    corrected_sql: str
    """The query that computes the corrected values (the same for every finding of a statement)."""

    chose: str = ""
    """Where the inflated values chose which rows are served or their order (``"HAVING"``, ``"ORDER BY
    with LIMIT"``): the corrected query serves other rows there; "" where they only changed values."""

    def describe(self) -> str:
        """One line: ``SUM(o.total) counts o (orders) once per row of i (items): 350.0 -> 150.0``."""
        repeated, repeating = ", ".join(self.repeated), ", ".join(self.repeating)
        line = f"{self.function}({self.argument}) counts {repeated} once per row of {repeating}"
        if self.written is not None or self.corrected is not None:
            line += f": {_shown(self.written)} -> {_shown(self.corrected)}"
        if self.factor is not None:
            line += f" (factor {self.factor:.3g})"
        if self.chose:
            line += f"; by {self.chose} it chose other rows than the corrected values choose"
        return line


def _shown(value: object) -> str:
    """A value as a reader compares it: a server's exact number as written (``30``, not ``Decimal('30')``,
    PostgreSQL's and MySQL's sums), anything else as Python writes it (text quoted)."""
    return str(value) if isinstance(value, Decimal) else repr(value)
