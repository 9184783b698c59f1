"""Reports where users are: the policy's report sink (``on_report``), the connection's last report, and
one structured log record per flagged or changed statement."""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import GuardPolicy, GuardReport
from tests.helpers import EXPLODING_SQL, fill_fanout

Opener = Callable[..., Any]


def _connect(guard: Any = None) -> Any:
    return guarded_sqlite.connect(":memory:", guard=guard)


def _wrap(guard: Any = None) -> Any:
    return guarded_sqlite.wrap(sqlite3.connect(":memory:"), guard=guard)


@pytest.fixture(params=[_connect, _wrap], ids=["connect", "wrap"])
def opener(request: pytest.FixtureRequest) -> Opener:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def collected() -> list[GuardReport]:
    return []


def _filled(opener: Opener, guard: Any) -> Any:
    con = opener(guard)
    fill_fanout(con)
    return con


# --- the sink ---------------------------------------------------------------------------------------


def test_the_sink_receives_every_statements_report_in_order(opener: Opener, collected: list[GuardReport]) -> None:
    con = _filled(opener, GuardPolicy(on_report=collected.append))
    collected.clear()  # fill_fanout's own statements were delivered too
    first = con.execute("SELECT name FROM customers WHERE id = ?", (1,))
    second = con.cursor().execute(EXPLODING_SQL)
    third = con.execute("SELECT name FROM customers WHERE id = -1")
    assert [report.sql for report in collected] == [
        "SELECT name FROM customers WHERE id = ?",
        EXPLODING_SQL,
        "SELECT name FROM customers WHERE id = -1",
    ]
    # The very report the cursor gives, not a copy; and the rows are the patched ones.
    assert collected == [first.guard_report, second.guard_report, third.guard_report]
    assert collected[1] is second.guard_report
    assert collected[1].action == "distinct_injected" and len(second.fetchall()) == 4
    assert collected[2].trigger == "empty_result"


def test_the_sink_sees_a_failed_statement_and_the_error_still_reaches_the_caller(
    opener: Opener, collected: list[GuardReport]
) -> None:
    con = _filled(opener, GuardPolicy(on_report=collected.append))
    collected.clear()
    with pytest.raises(sqlite3.OperationalError, match="no such table: missing"):
        con.execute("SELECT * FROM missing")
    (report,) = collected
    assert report.trigger == "exec_error" and report.error == "OperationalError: no such table: missing"


def test_the_sink_sees_executemany_and_executescript(opener: Opener, collected: list[GuardReport]) -> None:
    con = opener(GuardPolicy(on_report=collected.append))
    con.executescript("CREATE TABLE t (x); CREATE TABLE u (y)")
    con.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])
    assert [(report.sql, report.probed) for report in collected] == [
        ("CREATE TABLE t (x); CREATE TABLE u (y)", False),
        ("INSERT INTO t VALUES (?)", False),
    ]
    with pytest.raises(sqlite3.IntegrityError):
        con.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", [(1, 1), (1, 2)])
    assert collected[-1].trigger == "exec_error"


def test_observe_mode_delivers_and_off_mode_does_not(opener: Opener, collected: list[GuardReport]) -> None:
    observed = _filled(opener, GuardPolicy(mode="observe", on_report=collected.append))
    collected.clear()
    rows = observed.execute(EXPLODING_SQL).fetchall()
    assert len(rows) == 24 and [(r.trigger, r.action) for r in collected] == [("cartesian_explosion", "none")]
    off = _filled(opener, GuardPolicy(mode="off", on_report=collected.append))
    off.execute(EXPLODING_SQL).fetchall()
    assert len(collected) == 1


def test_a_sink_that_raises_changes_nothing_and_is_logged(opener: Opener, caplog: pytest.LogCaptureFixture) -> None:
    def broken(report: GuardReport) -> None:
        raise RuntimeError("sink is down")

    con = _filled(opener, GuardPolicy(on_report=broken))
    reference = sqlite3.connect(":memory:")
    fill_fanout(reference)
    caplog.clear()  # fill_fanout's statements reached the broken sink too
    with caplog.at_level(logging.WARNING, logger="guarded_sqlite"):
        rows = con.execute("SELECT id, name FROM customers ORDER BY id").fetchall()
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            con.execute("SELECT * FROM missing")
    assert rows == reference.execute("SELECT id, name FROM customers ORDER BY id").fetchall()
    failures = [r for r in caplog.records if "report sink raised" in r.getMessage()]
    assert len(failures) == 2 and all(r.exc_info and r.exc_info[0] is RuntimeError for r in failures)


def test_statements_a_sink_runs_are_not_delivered_back_to_it(opener: Opener) -> None:
    """A sink that stores each report in a table of the same connection would otherwise never end."""
    holder: dict[str, Any] = {}

    def store(report: GuardReport) -> None:
        holder["con"].execute("INSERT INTO findings VALUES (?, ?)", (report.sql, report.trigger))

    con = _filled(opener, GuardPolicy(on_report=store))
    holder["con"] = con
    con.execute("CREATE TABLE findings (sql TEXT, trigger TEXT)")
    rows = con.execute(EXPLODING_SQL).fetchall()
    assert len(rows) == 4
    stored = con.execute("SELECT sql, trigger FROM findings").fetchall()
    assert stored[-1] == (EXPLODING_SQL, "cartesian_explosion")
    assert all(sql != "INSERT INTO findings VALUES (?, ?)" for sql, _ in stored)


def test_on_report_must_be_callable() -> None:
    with pytest.raises(TypeError, match="on_report must be callable"):
        GuardPolicy(on_report="print")  # type: ignore[arg-type]


def test_the_sink_sees_statements_of_pandas_and_sqlalchemy(collected: list[GuardReport]) -> None:
    pandas = pytest.importorskip("pandas")
    sqlalchemy = pytest.importorskip("sqlalchemy")
    policy = GuardPolicy(on_report=collected.append)

    con = guarded_sqlite.connect(":memory:", guard=policy)
    fill_fanout(con)
    frame = pandas.read_sql(EXPLODING_SQL, con)
    assert len(frame) == 4 and collected[-1].sql == EXPLODING_SQL and collected[-1].patched
    assert con.guard_report is collected[-1]

    collected.clear()
    engine = sqlalchemy.create_engine("sqlite://", module=guarded_sqlite, connect_args={"guard": policy})
    with engine.connect() as connection:
        fill_fanout(connection.connection.driver_connection)
        result = connection.execute(sqlalchemy.text(EXPLODING_SQL)).fetchall()
        assert len(result) == 4
        assert collected[-1].sql == EXPLODING_SQL and collected[-1].action == "distinct_injected"
        assert connection.connection.driver_connection.guard_report is collected[-1]
    engine.dispose()


# --- the connection's last report -----------------------------------------------------------------


def test_the_connections_report_is_its_last_statements_by_any_cursor(opener: Opener) -> None:
    con = _filled(opener, None)
    fresh = opener(None)
    assert fresh.guard_report is None
    first, second = con.cursor(), con.cursor()
    first.execute(EXPLODING_SQL)
    assert con.guard_report is first.guard_report
    second.execute("SELECT name FROM customers WHERE id = ?", (2,))
    assert con.guard_report is second.guard_report and con.guard_report.trigger is None
    with pytest.raises(sqlite3.OperationalError):
        first.execute("SELECT nothing FROM nowhere")
    assert con.guard_report.trigger == "exec_error"


# --- log records ------------------------------------------------------------------------------------


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger="guarded_sqlite"):
        yield caplog


def _ours(records: pytest.LogCaptureFixture, level: int = logging.DEBUG) -> list[logging.LogRecord]:
    """The statements' records at ``level`` or above (not the DEBUG records with the full SQL)."""
    return [
        r for r in records.records if r.name == "guarded_sqlite" and r.levelno >= level and hasattr(r, "guarded_sqlite")
    ]


def test_a_healthy_statement_logs_nothing(opener: Opener, records: pytest.LogCaptureFixture) -> None:
    con = _filled(opener, None)
    records.clear()
    con.execute("SELECT name FROM customers").fetchall()
    con.execute("SELECT DISTINCT city FROM customers").fetchall()
    assert [r for r in records.records if r.name == "guarded_sqlite"] == []


def test_an_explosion_left_alone_in_observe_mode_is_one_debug_record(
    opener: Opener, records: pytest.LogCaptureFixture
) -> None:
    con = _filled(opener, "observe")
    records.clear()
    report = con.execute(EXPLODING_SQL + " WHERE c.name <> 'secret-name'").guard_report
    (record,) = _ours(records)
    # Not analysed in observe mode: the guard cannot say the rows are multiplied, so nothing above DEBUG.
    assert record.levelno == logging.DEBUG
    fields = record.__dict__["guarded_sqlite"]
    assert fields["trigger"] == "cartesian_explosion" and fields["action"] == "none" and fields["mode"] == "observe"
    assert (fields["rows"], fields["unique_rows"], fields["final_rows"]) == (24, 4, 24)
    assert fields["dup_ratio"] == report.dup_ratio
    assert "secret-name" not in record.getMessage() and "secret-name" not in json.dumps(fields)
    assert record.getMessage().startswith("guarded_sqlite cartesian_explosion left unchanged (24 rows, 4 distinct)")


def test_a_join_multiplication_served_unchanged_is_a_warning(opener: Opener, records: pytest.LogCaptureFixture) -> None:
    """The analysis established amplification, but P1's check run shows DISTINCT would merge names that
    differ in case (the COLLATE): the rows stay repeated, and that is worth a WARNING."""
    con = opener(None)
    con.executescript(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER);"
        "INSERT INTO customers VALUES (1, 'Ana'), (2, 'ana');"
        "INSERT INTO orders (customer_id) VALUES (1), (1), (1), (1), (1), (2), (2), (2), (2), (2);"
    )
    records.clear()
    sql = "SELECT c.name COLLATE NOCASE FROM customers c JOIN orders o ON o.customer_id = c.id"
    report = con.execute(sql).guard_report
    assert (report.trigger, report.action, report.provenance) == ("cartesian_explosion", "none", "amplified")
    (record,) = _ours(records)
    assert record.levelno == logging.WARNING
    fields = record.__dict__["guarded_sqlite"]
    assert fields["provenance"] == "amplified" and fields["decisions"][0]["applied"] is False
    assert "P1 not applied: the query names a COLLATE" in record.getMessage()


def test_a_limit_refusal_is_not_analysed_and_so_is_debug(opener: Opener, records: pytest.LogCaptureFixture) -> None:
    con = _filled(opener, None)
    records.clear()
    sql = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id ORDER BY c.name LIMIT 12"
    report = con.execute(sql).guard_report
    assert (report.trigger, report.action, report.provenance) == ("cartesian_explosion", "none", None)
    (record,) = _ours(records)
    assert record.levelno == logging.DEBUG and record.__dict__["guarded_sqlite"]["decisions"][0]["rule"] == "P1"


def test_value_repeats_left_alone_are_debug(opener: Opener, records: pytest.LogCaptureFixture) -> None:
    con = _filled(opener, None)
    records.clear()
    report = con.execute("SELECT customer_id FROM orders").guard_report
    assert report.trigger == "cartesian_explosion" and report.provenance == "value_repeats"
    (record,) = _ours(records)
    assert record.levelno == logging.DEBUG and record.__dict__["guarded_sqlite"]["provenance"] == "value_repeats"


def test_empty_results_and_errors_are_debug_records_without_literals(
    opener: Opener, records: pytest.LogCaptureFixture
) -> None:
    con = _filled(opener, None)
    records.clear()
    con.execute("SELECT name FROM customers WHERE name = 'tok_9f8e'").fetchall()
    with pytest.raises(sqlite3.OperationalError):
        con.execute("SELECT name FROM customers WHERE name = 'tok_9f8e")  # unterminated: the error quotes it
    empty, failed = _ours(records)
    assert (empty.levelno, failed.levelno) == (logging.DEBUG, logging.DEBUG)
    assert empty.__dict__["guarded_sqlite"]["trigger"] == "empty_result"
    assert failed.__dict__["guarded_sqlite"]["trigger"] == "exec_error"
    for record in (empty, failed):
        assert "tok_9f8e" not in record.getMessage() and "tok_9f8e" not in json.dumps(record.__dict__["guarded_sqlite"])
    full = [r for r in records.records if r.name == "guarded_sqlite" and not hasattr(r, "guarded_sqlite")]
    assert len(full) == 2 and all(r.levelno == logging.DEBUG and "tok_9f8e" in r.getMessage() for r in full)


def test_routine_events_log_nothing_at_info(opener: Opener, caplog: pytest.LogCaptureFixture) -> None:
    """What a click-log application shows its users (every INFO record): nothing of a statement the guard
    neither changed nor judged a likely bug, in observe mode and under the key-based presets."""
    for guard in ("observe", "patch", "text_to_sql"):
        con = _filled(opener, guard)
        with caplog.at_level(logging.INFO, logger="guarded_sqlite"):
            caplog.clear()
            con.execute("SELECT name FROM customers WHERE name = 'nobody'").fetchall()  # empty
            with pytest.raises(sqlite3.OperationalError):
                con.execute("SELECT nope FROM customers")  # an error the application catches
            con.execute("SELECT customer_id FROM orders").fetchall()  # value repeats
            if guard == "observe":
                con.execute(EXPLODING_SQL).fetchall()  # flagged, not analysed
            con.execute("SELECT name FROM customers").fetchall()  # healthy
        assert [r.getMessage() for r in caplog.records if r.name == "guarded_sqlite"] == [], guard


def test_nothing_is_built_for_a_level_no_handler_takes(
    opener: Opener, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DEBUG record costs a level check when DEBUG is off: no report, no normalised SQL."""
    from guarded_sqlite import sinks

    def refuse(*args: Any) -> Any:
        raise AssertionError("built for a record no handler takes")

    con = _filled(opener, "observe")
    monkeypatch.setattr(sinks, "structured_fields", refuse)
    monkeypatch.setattr(sinks, "built", refuse)
    with caplog.at_level(logging.INFO, logger="guarded_sqlite"):
        con.execute("SELECT name FROM customers WHERE name = 'nobody'").fetchall()
        con.execute(EXPLODING_SQL).fetchall()
    assert [r for r in caplog.records if r.name == "guarded_sqlite"] == []


def test_no_record_is_made_when_only_null_handlers_would_take_it() -> None:
    """Without a handler of the application's (the library's NullHandler alone), a WARNING-level finding
    builds no record; a handler on the root, or a filter on the logger, gets it as before."""
    from guarded_sqlite import sinks

    made: list[logging.LogRecord] = []
    factory = logging.getLogRecordFactory()

    def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        if record.name == "guarded_sqlite":
            made.append(record)
        return record

    logging.setLogRecordFactory(counting)
    root = logging.getLogger()
    saved_handlers = root.handlers[:]
    sql = "SELECT c.name, SUM(c.id) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name"
    try:
        root.handlers = []  # pytest's own capture handlers would take the record
        con = _filled(_connect, "patch")
        assert con.execute(sql).guard_report.trigger == "aggregate_fanout"
        assert made == []
        assert sinks._handled(logging.getLogger("guarded_sqlite"), logging.WARNING) is False
        kept: list[logging.LogRecord] = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                kept.append(record)

        handler = Keep(level=logging.ERROR)  # above the record's level: still nothing to make
        root.addHandler(handler)
        con.execute(sql).fetchall()
        assert made == [] and kept == []
        handler.setLevel(logging.WARNING)
        con.execute(sql).fetchall()
        assert [r.levelno for r in made] == [logging.WARNING] and kept == made
        root.removeHandler(handler)
        logger = logging.getLogger("guarded_sqlite")
        seen: list[logging.LogRecord] = []

        def note(record: logging.LogRecord) -> bool:
            seen.append(record)
            return True

        logger.addFilter(note)
        try:
            con.execute(sql).fetchall()
        finally:
            logger.removeFilter(note)
        assert [r.levelno for r in seen] == [logging.WARNING]
    finally:
        root.handlers = saved_handlers
        logging.setLogRecordFactory(factory)


def test_an_aggregate_fan_out_served_unchanged_is_a_warning_and_corrected_is_info(
    opener: Opener, records: pytest.LogCaptureFixture
) -> None:
    sql = "SELECT c.name, SUM(c.id) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name"
    for guard, level, action in (
        ("patch", logging.WARNING, "none"),
        ("text_to_sql", logging.INFO, "aggregate_defanned"),
    ):
        con = _filled(opener, guard)
        records.clear()
        report = con.execute(sql).guard_report
        assert (report.trigger, report.action) == ("aggregate_fanout", action)
        (record,) = _ours(records)
        assert record.levelno == level, guard


@pytest.mark.parametrize(
    ("trigger", "action", "verdict", "fanning", "copies", "level"),
    [
        (None, "none", None, (), None, None),
        (None, "distinct_removed", None, (), None, logging.INFO),
        ("cartesian_explosion", "distinct_injected", "amplified", ("o",), 5, logging.INFO),
        ("cartesian_explosion", "join_copies_removed", "amplified", ("o",), 5, logging.INFO),
        # join copies counted on the data, served unchanged (e.g. a COLLATE refusal)
        ("cartesian_explosion", "none", "amplified", ("o",), 5, logging.WARNING),
        ("cartesian_explosion", "none", "identified", ("o",), 5, logging.WARNING),
        # the keys allow a fan-out the data does not have: value repeats, routine
        ("cartesian_explosion", "none", "amplified", ("o",), 0, logging.DEBUG),
        # the check could not run (a user function, say): unknown, routine
        ("cartesian_explosion", "none", "unknown", (), None, logging.DEBUG),
        ("cartesian_explosion", "none", "identified", (), None, logging.DEBUG),
        ("cartesian_explosion", "none", "value_repeats", (), None, logging.DEBUG),
        ("cartesian_explosion", "none", None, (), None, logging.DEBUG),
        ("aggregate_fanout", "none", None, (), None, logging.WARNING),
        ("aggregate_fanout", "aggregate_defanned", None, (), None, logging.INFO),
        ("empty_result", "none", None, (), None, logging.DEBUG),
        ("exec_error", "none", None, (), None, logging.DEBUG),
        ("exec_error", "candidate_selected", None, (), None, logging.INFO),
    ],
)
def test_level_of(trigger: Any, action: Any, verdict: Any, fanning: Any, copies: Any, level: Any) -> None:
    from guarded_sqlite._analysis.provenance import Provenance
    from guarded_sqlite.report import ReportState, RuleDecision
    from guarded_sqlite.sinks import level_of

    provenance = None if verdict is None else Provenance(verdict, "evidence", fanning=fanning)
    decisions = () if verdict is None else (RuleDecision("P1", action != "none", "why", copies=copies),)
    state = ReportState("patch", "q", "q", trigger, action, 2, 1, 1, None, None, decisions, 0, None, None, provenance)
    assert level_of(state) == level


def test_a_json_formatter_gets_the_fields(opener: Opener) -> None:
    """The recipe the README gives: a formatter that dumps ``record.guarded_sqlite``."""
    lines: list[str] = []

    class JsonLines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.dumps({"message": record.getMessage(), **getattr(record, "guarded_sqlite", {})}))

    handler = JsonLines(level=logging.INFO)
    logger = logging.getLogger("guarded_sqlite")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        con = _filled(opener, None)
        con.execute(EXPLODING_SQL).fetchall()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    (line,) = lines
    parsed = json.loads(line)
    assert parsed["action"] == "distinct_injected" and parsed["trigger"] == "cartesian_explosion"
    assert parsed["decisions"] == [{"rule": "P1", "applied": True, "reason": parsed["decisions"][0]["reason"]}]


def test_an_application_without_logging_configured_prints_nothing() -> None:
    """The library's NullHandler keeps Python's last-resort handler from printing WARNING records."""
    import subprocess
    import sys

    script = (
        "import guarded_sqlite\n"
        "con = guarded_sqlite.connect(':memory:')\n"
        "con.executescript('CREATE TABLE c (id INTEGER PRIMARY KEY, n); CREATE TABLE o (id INTEGER PRIMARY KEY, c);"
        " INSERT INTO c VALUES (1, 1); INSERT INTO o (c) VALUES (1), (1), (1), (1), (1), (1);')\n"
        "print(len(con.execute('SELECT c.n FROM c JOIN o ON o.c = c.id LIMIT 6').fetchall()))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout == "6\n" and done.stderr == ""


def test_debug_records_are_opt_in_when_the_root_logger_is_at_debug() -> None:
    """beets captures every logger at DEBUG during an import and expects silence: routine statements
    (an empty result) must not reach a root at DEBUG unless the guarded_sqlite logger asks for DEBUG."""
    script = (
        "import logging, guarded_sqlite\n"
        "records = []\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record): records.append(record)\n"
        "logging.getLogger().addHandler(Keep())\n"
        "logging.getLogger().setLevel(logging.DEBUG)\n"
        "con = guarded_sqlite.connect(':memory:')\n"
        "con.execute('CREATE TABLE t (x)')\n"
        "con.execute('SELECT x FROM t').fetchall()\n"
        "before = len(records)\n"
        "logging.getLogger('guarded_sqlite').setLevel(logging.DEBUG)\n"
        "con.execute('SELECT x FROM t WHERE x = 1').fetchall()\n"
        "print(before, [r.levelno for r in records[before:]])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split(maxsplit=1) == ["0", "[10, 10]\n"]  # the record and its full-SQL companion
