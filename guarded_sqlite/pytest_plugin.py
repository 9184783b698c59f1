"""A pytest plugin that runs a test suite under the guard and reports what it found, per test.

Registered as the ``pytest11`` entry point ``guarded_sqlite``, so pytest loads it in every run where
the package is installed. Without ``--guarded-sqlite`` it only adds its options and its marker: it
installs nothing, registers no per-test hooks, and imports nothing beyond this module (sqlglot and
wrapt stay unimported). Python imports the ``guarded_sqlite`` package itself to reach this module.

``--guarded-sqlite[=PRESET]`` (bare: ``observe``; also ``patch``, ``text_to_sql``, ``paper``) calls
``guarded_sqlite.install()`` at session start with that preset and a report sink, and restores
``sqlite3.connect`` at session end. Every ``sqlite3.connect`` the code under test makes is then
guarded, SQLAlchemy's pysqlite dialect included (it looks ``sqlite3.dbapi2.connect`` up when it
connects). Code that ran ``from sqlite3 import connect`` before the session started keeps the original,
and connections opened with ``guarded_sqlite.connect``/``wrap`` keep their own policy and sink.

The sink keeps each statement that was flagged or changed, attributed to the test running when it
executed (fixtures included, tagged with the phase: setup, call or teardown), and counts repeats. The
terminal summary lists explosions and changed statements; empty results and execution errors, which
applications produce in normal work, are counted in one line unless ``--guarded-sqlite-verbose``.
``--guarded-sqlite-fail=explosion`` fails a test during which a ``cartesian_explosion`` was flagged
(``flagged``: any flagged statement), unless it is marked ``@pytest.mark.guarded_sqlite_allow``;
``--guarded-sqlite-json=PATH`` writes every finding as JSON. SQL is shown with its literals replaced
by ``?`` (``rewrite.normalise_literals``), as in the log records. Not aggregated across pytest-xdist
workers: run the guarded session without ``-n``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sqlite3.dbapi2
import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .policy import GuardPolicy
    from .report import GuardReport

PRESETS = ("observe", "patch", "text_to_sql", "paper")
"""What ``--guarded-sqlite=`` takes; ``"off"`` would deliver no reports, so it is not offered."""
FAIL_ON = ("explosion", "flagged")
MARKER = "guarded_sqlite_allow"
EXPLOSION = "cartesian_explosion"
QUIET_TRIGGERS = ("empty_result", "exec_error")
SQL_WIDTH = 60
"""Characters of normalised SQL per table row (``--guarded-sqlite-verbose`` shows all of it)."""
OUTSIDE = "(outside tests)"
"""Where statements run during collection or a session hook are attributed."""


class _PresetFlag(argparse.Action):
    """``--guarded-sqlite`` and its ``--guarded-sqlite=PRESET`` spellings, registered as separate
    option strings with no argument. With an optional argument (``nargs="?"``) argparse would take
    the next word as the preset: ``pytest --guarded-sqlite tests/`` would read ``tests/`` as one."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, (option_string or "").partition("=")[2] or "observe")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("guarded_sqlite", "guarded_sqlite: run the suite's sqlite3 connections under the guard")
    group.addoption(
        "--guarded-sqlite",
        action=_PresetFlag,
        nargs=0,
        dest="guarded_sqlite",
        default=None,
        help="guard every sqlite3.connect of the run and summarise findings per test. "
        f"--guarded-sqlite=PRESET picks the preset: {', '.join(PRESETS)} (bare flag: observe, rows unchanged)",
    )
    group.addoption(
        *(f"--guarded-sqlite={preset}" for preset in PRESETS),
        action=_PresetFlag,
        nargs=0,
        dest="guarded_sqlite",
        help=argparse.SUPPRESS,
    )
    group.addoption(
        "--guarded-sqlite-fail",
        choices=FAIL_ON,
        default=None,
        help="fail a test during which a cartesian_explosion was flagged (explosion) or any statement "
        f"was flagged (flagged); @pytest.mark.{MARKER} exempts a test",
    )
    group.addoption(
        "--guarded-sqlite-verbose",
        action="store_true",
        default=False,
        help="list empty_result and exec_error findings in the summary too, with the SQL untruncated",
    )
    group.addoption("--guarded-sqlite-json", metavar="PATH", default=None, help="write every finding as JSON")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: --guarded-sqlite-fail does not fail this test (its findings are still reported)"
    )
    preset = config.getoption("guarded_sqlite")
    if preset is None:
        dependent = [
            name
            for name, given in (
                ("--guarded-sqlite-fail", config.getoption("guarded_sqlite_fail") is not None),
                ("--guarded-sqlite-verbose", config.getoption("guarded_sqlite_verbose")),
                ("--guarded-sqlite-json", config.getoption("guarded_sqlite_json") is not None),
            )
            if given
        ]
        if dependent:
            raise pytest.UsageError(f"{', '.join(dependent)} needs --guarded-sqlite[=PRESET]")
        return
    # The per-test hooks live on this object, registered only now: without the flag pytest never
    # calls into the plugin during collection or tests.
    config.pluginmanager.register(GuardedRun(config, preset), "guarded_sqlite_run")


@dataclass
class Finding:
    """One distinct (statement, test, phase, verdict) and how often it happened."""

    report: GuardReport
    """The first report of it; later ones only add to ``count``."""
    test: str
    phase: str
    count: int = 1


class Collector:
    """The report sink: keeps flagged or changed statements, attributed to the current test.

    Called from whichever thread ran the statement. The current test is one attribute holding a tuple,
    replaced whole by the main thread, so threads the test started see the test that started them."""

    def __init__(self) -> None:
        self.where: tuple[str, str] = (OUTSIDE, "session")
        self._lock = threading.Lock()
        self._findings: dict[tuple[str, str, str, str | None, str | None, str], Finding] = {}
        self._by_test: dict[str, list[Finding]] = {}

    def __call__(self, report: GuardReport) -> None:
        if not report.flagged and report.action == "none":
            return
        test, phase = self.where
        # Keyed on the SQL as run: normalising needs sqlglot, which the summary imports once at the end.
        key = (report.sql, test, phase, report.trigger, report.provenance, report.action)
        with self._lock:
            finding = self._findings.get(key)
            if finding is None:
                finding = self._findings[key] = Finding(report, test, phase)
                self._by_test.setdefault(test, []).append(finding)
            else:
                finding.count += 1

    def findings(self) -> list[Finding]:
        with self._lock:
            return list(self._findings.values())

    def of_test(self, test: str, phases: tuple[str, ...]) -> list[Finding]:
        with self._lock:
            return [finding for finding in self._by_test.get(test, ()) if finding.phase in phases]


def _policy(preset: str, sink: Callable[[GuardReport], object]) -> GuardPolicy:
    from .policy import GuardPolicy

    if preset == "text_to_sql":
        return GuardPolicy.text_to_sql(on_report=sink)
    if preset == "paper":
        return GuardPolicy.paper(on_report=sink)
    return GuardPolicy(mode="observe" if preset == "observe" else "patch", on_report=sink)


def _statement(sql: str, width: int | None) -> str:
    """``sql`` with its literals replaced by ``?`` and whitespace runs collapsed, cut to ``width``."""
    from .sinks import loggable_sql

    text = " ".join(loggable_sql(sql).split())
    if width is not None and len(text) > width:
        text = text[: width - 3] + "..."
    return text


def _test_label(finding: Finding) -> str:
    return finding.test if finding.phase == "call" else f"{finding.test} [{finding.phase}]"


def _is_quiet(finding: Finding) -> bool:
    """Empty results and errors left alone: frequent in applications, so counted rather than listed."""
    return finding.report.trigger in QUIET_TRIGGERS and finding.report.action == "none"


class GuardedRun:
    """The plugin's state for one session run with ``--guarded-sqlite``."""

    def __init__(self, config: pytest.Config, preset: str) -> None:
        self.preset = preset
        self.fail_on: str | None = config.getoption("guarded_sqlite_fail")
        self.verbose: bool = config.getoption("guarded_sqlite_verbose")
        json_path = config.getoption("guarded_sqlite_json")
        self.json_path = None if json_path is None else Path(json_path)
        self.collector = Collector()
        self.policy = _policy(preset, self.collector)
        self._previous: tuple[Any, Any] | None = None

    # --- install for the session ------------------------------------------------------------------

    def _install(self) -> None:
        from ._api import install

        install(guard=self.policy)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._previous = (sqlite3.connect, sqlite3.dbapi2.connect)
        self._install()

    def _restore(self) -> None:
        if self._previous is not None:
            # What was there before, not necessarily sqlite3's: a conftest may have installed its own.
            sqlite3.connect, sqlite3.dbapi2.connect = self._previous
            self._previous = None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._restore()
        if self.json_path is not None:
            self._write_json(self.json_path)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._restore()  # if the session never finished (an internal error)

    # --- which test is running --------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        # A test of install()/uninstall() leaves sqlite3.connect unguarded; guard the tests after it.
        if not getattr(sqlite3.connect, "__guarded_sqlite__", False):
            self._install()
        try:
            return (yield)
        finally:
            self.collector.where = (OUTSIDE, "session")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, object, object]:
        self.collector.where = (item.nodeid, "setup")
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        self.collector.where = (item.nodeid, "call")
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, object, object]:
        self.collector.where = (item.nodeid, "teardown")
        return (yield)

    # --- --guarded-sqlite-fail --------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if self.fail_on is None or report.when == "setup" or item.get_closest_marker(MARKER) is not None:
            return report
        # A fixture's explosion during setup fails the test's call; one during teardown, its teardown.
        phases = ("setup", "call") if report.when == "call" else ("teardown",)
        failing = [
            finding
            for finding in self.collector.of_test(item.nodeid, phases)
            if finding.report.trigger == EXPLOSION or (self.fail_on == "flagged" and finding.report.flagged)
        ]
        if not failing:
            return report
        message = self._failure_message(failing)
        if report.passed:
            report.outcome = "failed"
            report.longrepr = message
        elif report.failed:  # keep the test's own failure and add ours beside it
            report.sections.append(("guarded_sqlite", message))
        return report

    def _failure_message(self, failing: list[Finding]) -> str:
        what = "cartesian_explosion" if self.fail_on == "explosion" else "flagged statement"
        lines = [f"guarded_sqlite: {what} during this test (--guarded-sqlite-fail={self.fail_on}):"]
        for finding in failing:
            times = "" if finding.count == 1 else f", {finding.count}x"
            lines.append(f"  {_statement(finding.report.sql, None)}")
            lines.append(f"    ({finding.phase}{times}) {finding.report.summary()}")
        lines.append(f"Exempt a test with @pytest.mark.{MARKER}.")
        return "\n".join(lines)

    # --- the summary ------------------------------------------------------------------------------

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        writer = terminalreporter
        writer.write_sep("=", f"guarded_sqlite ({self.preset})")
        if writer.config.pluginmanager.hasplugin("dsession"):
            # pytest-xdist's controller runs no test: the statements ran, and were collected, in the workers.
            writer.write_line("the tests ran in pytest-xdist workers, whose findings are not shown: run without -n")
            return
        findings = self.collector.findings()
        if not findings:
            writer.write_line("no statement was flagged or changed")
            return
        width = None if self.verbose else SQL_WIDTH
        listed = [f for f in findings if self.verbose or not _is_quiet(f)]
        rows = _aggregate(listed, width)
        if rows:
            _write_table(writer, ("statement", "test", "trigger", "provenance", "action", "count"), rows)
        quiet = [f for f in findings if _is_quiet(f)]
        if quiet and not self.verbose:
            parts = []
            for trigger in QUIET_TRIGGERS:
                of_trigger = [f for f in quiet if f.report.trigger == trigger]
                if of_trigger:
                    statements = len({f.report.sql for f in of_trigger})
                    tests = len({f.test for f in of_trigger})
                    runs = sum(f.count for f in of_trigger)
                    parts.append(
                        f"{trigger}: {runs} (of {statements} statement{'s' * (statements != 1)}"
                        f" in {tests} test{'s' * (tests != 1)})"
                    )
            writer.write_line(f"{'; '.join(parts)}; --guarded-sqlite-verbose lists them")
        writer.write_line(_totals(findings))

    def _write_json(self, path: Path) -> None:
        from .sinks import structured_fields

        records = [
            {"test": f.test, "phase": f.phase, "count": f.count, **structured_fields(f.report, "sqlite")}
            for f in self.collector.findings()
        ]
        path.write_text(json.dumps({"preset": self.preset, "findings": records}, indent=2) + "\n", encoding="utf-8")


def _aggregate(findings: list[Finding], width: int | None) -> list[tuple[str, ...]]:
    """Table rows: findings that normalise to the same statement, test and verdict are one row.
    Explosions first, then other changes, then the rest; most frequent first within each."""
    counts: dict[tuple[str, ...], int] = {}
    for finding in findings:
        report = finding.report
        key = (
            _statement(report.sql, width),
            _test_label(finding),
            report.trigger or "-",
            report.provenance or "-",
            report.action,
        )
        counts[key] = counts.get(key, 0) + finding.count

    def rank(item: tuple[tuple[str, ...], int]) -> tuple[int, int, tuple[str, ...]]:
        (_, _, trigger, _, action), count = item
        return (0 if trigger == EXPLOSION else 1 if action != "none" else 2, -count, item[0])

    return [(*key, str(count)) for key, count in sorted(counts.items(), key=rank)]


def _write_table(writer: pytest.TerminalReporter, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        cells = [cell.ljust(w) for cell, w in zip(row[:-1], widths)] + [row[-1].rjust(widths[-1])]
        writer.write_line("  ".join(cells))


def _totals(findings: list[Finding]) -> str:
    def runs(keep: Callable[[GuardReport], bool]) -> int:
        return sum(f.count for f in findings if keep(f.report))

    explosions = runs(lambda r: r.trigger == EXPLOSION)
    patched = runs(lambda r: r.trigger == EXPLOSION and r.action != "none")
    other_changes = runs(lambda r: r.trigger != EXPLOSION and r.action != "none")
    tests = len({f.test for f in findings} - {OUTSIDE})
    return (
        f"totals: {explosions} cartesian_explosion ({patched} patched), {other_changes} other changed, "
        f"{runs(lambda r: r.trigger == 'empty_result')} empty_result, "
        f"{runs(lambda r: r.trigger == 'exec_error')} exec_error, in {tests} test{'s' * (tests != 1)}"
    )
