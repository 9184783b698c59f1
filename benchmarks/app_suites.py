"""What the ``"patch"`` preset does under real applications' test suites.

Downloads the source distributions of a few projects that use ``sqlite3`` (Django, sqlite-utils,
SQLAlchemy) from PyPI into a work directory outside the repository, installs each with its test
requirements and guarded_sqlite (editable, from this checkout) into a throwaway virtualenv of its own,
and runs its test suite three times: plain ``sqlite3``, ``install(guard="observe")`` and
``install(guard="patch")``. A ``sitecustomize.py`` put on ``PYTHONPATH`` does the install before the
project imports anything, and records:

* every statement for which a patch rule (P1/P2) was *considered* (a wrapper around
  ``guarded_sqlite.core.repair_statement``: SQL, dup ratio, action, each decision with its reason,
  provenance verdict and evidence, and the test it ran in), plus every INFO record of the
  ``guarded_sqlite`` logger (the log line each applied patch writes) as a cross-check;
* for unittest-based runners (Django's ``runtests.py``), each test's outcome (pytest suites use
  ``--junitxml``).

Then each guarded run's per-test outcomes are compared with the plain run's. Everything downloaded
or produced stays in ``--work`` (default ``/tmp/guarded_app_suites``); a summary goes to
``WORK/summary.json`` and a Markdown report to stdout.

    .venv/bin/python benchmarks/app_suites.py                       # all projects, all modes
    .venv/bin/python benchmarks/app_suites.py --projects django --modes patch   # one more patch run

Re-running reuses the downloads and the virtualenvs found in ``--work`` (``--fresh`` rebuilds them).
This is a script, not a test: pytest collects only ``tests`` and ``guarded_sqlite``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MODES = ("plain", "observe", "patch")

# The apps most relevant to joins and duplicates first, then the rest of the ORM's (the whole suite
# takes over 15 minutes a run on a 2-core machine; pass --django-apps all for it).
DJANGO_APPS = (
    "queries lookup aggregation aggregation_regress expressions many_to_one many_to_many m2m_regress "
    "prefetch_related distinct_on_fields annotations select_related "
    "basic custom_lookups defer defer_regress delete delete_regress extra_regress filtered_relation foreign_object "
    "generic_relations generic_relations_regress known_related_objects m2m_and_m2o m2m_intermediary m2m_multiple "
    "m2m_recursive m2m_through m2m_through_regress m2o_recursive many_to_one_null model_inheritance "
    "model_inheritance_regress null_fk null_fk_ordering null_queries one_to_one or_lookups ordering proxy_models "
    "raw_query reverse_lookup select_related_onetoone select_related_regress string_lookup update xor_lookups "
    "expressions_case expressions_window db_functions dates datetimes custom_managers get_or_create bulk_create "
    "composite_pk multiple_database model_fields nested_foreign_keys admin_changelist admin_filters model_forms "
    "model_formsets fixtures fixtures_regress serializers contenttypes_tests auth_tests queryset_pickle pagination "
    "backends transactions update_only_fields custom_pk"
).split()

# The sitecustomize put on PYTHONPATH of every run. Plain runs import no guarded_sqlite at all.
SITECUSTOMIZE = r'''
"""Installed by guarded_sqlite's benchmarks/app_suites.py: guard sqlite3.connect, record what happens."""
import json
import os

_MODE = os.environ.get("GS_BENCH_MODE", "plain")
_OUT = os.environ.get("GS_BENCH_OUT")
_current = [None]


def _test_id():
    running = os.environ.get("PYTEST_CURRENT_TEST")
    if running:
        return running.rsplit(" (", 1)[0]
    return _current[0]


def _write(kind, record):
    if not _OUT:
        return
    with open(os.path.join(_OUT, f"{kind}-{os.getpid()}.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps(record, default=repr) + "\n")


def _unittest_hooks():
    import traceback
    import unittest.result
    import unittest.suite

    handle_class_setup = unittest.suite.TestSuite._handleClassSetUp

    def _handleClassSetUp(self, test, result):
        # Called before each test (and before its class's setUpClass): statements of setUpClass and
        # setUpTestData are attributed to the class's first test.
        try:
            _current[0] = test.id()
        except Exception:
            _current[0] = None
        return handle_class_setup(self, test, result)

    unittest.suite.TestSuite._handleClassSetUp = _handleClassSetUp

    if not os.environ.get("GS_BENCH_OUTCOMES"):
        return

    def _in_main_process():
        # Django's parallel workers report to the main process, which replays every event.
        import multiprocessing

        return multiprocessing.parent_process() is None

    def _hook(name, outcome):
        original = getattr(unittest.result.TestResult, name)

        def hooked(self, test, *args):
            try:
                if _in_main_process():
                    status = outcome
                    detail = None
                    if name == "addSubTest":
                        err = args[1]
                        failed = err is not None and issubclass(err[0], test.failureException)
                        status = None if err is None else ("fail" if failed else "error")
                    elif name == "addSkip":
                        detail = str(args[0])[:300]
                    if status is not None:
                        if status in ("fail", "error"):
                            err = args[-1]
                            try:
                                detail = "".join(traceback.format_exception(*err))[-4000:]
                            except Exception:
                                detail = repr(err)[-4000:]
                        _write("outcomes", {"test": test.id(), "outcome": status, "detail": detail})
            except Exception:
                pass
            return original(self, test, *args)

        setattr(unittest.result.TestResult, name, hooked)

    for name, outcome in (
        ("addSuccess", "pass"),
        ("addFailure", "fail"),
        ("addError", "error"),
        ("addSkip", "skip"),
        ("addExpectedFailure", "xfail"),
        ("addUnexpectedSuccess", "xpass"),
        ("addSubTest", None),
    ):
        _hook(name, outcome)


def _guard():
    import inspect
    import logging

    import guarded_sqlite
    from guarded_sqlite import core

    guarded_sqlite.install(guard=_MODE)

    class _Handler(logging.Handler):
        def emit(self, record):
            try:
                _write("log", {"test": _test_id(), "level": record.levelname, "message": record.getMessage()[:4000]})
            except Exception:
                pass

    logger = logging.getLogger("guarded_sqlite")
    logger.addHandler(_Handler(logging.INFO))
    logger.setLevel(logging.INFO)

    original = getattr(core, "repair_statement", None)
    if original is None:
        return
    signature = inspect.signature(original)

    def repair_statement(*args, **kwargs):
        outcome = original(*args, **kwargs)
        try:
            bound = signature.bind(*args, **kwargs).arguments
            rows = bound.get("rows")
            unique = bound.get("unique")
            n = None if rows is None else len(rows)
            applied = outcome.action != "none"
            sql = bound.get("sql")
            provenance = getattr(outcome, "provenance", None)
            _write(
                "repairs",
                {
                    "test": _test_id(),
                    "sql": sql if applied else sql[:1500],
                    "final_sql": outcome.final_sql if applied else None,
                    "trigger": bound.get("trigger"),
                    "rows": n,
                    "unique": unique,
                    "dup_ratio": (n - unique) / n if n and unique is not None else None,
                    "final_rows": len(outcome.rows),
                    "action": outcome.action,
                    "decisions": [[d.rule, d.applied, d.reason] for d in outcome.decisions],
                    "provenance": None if provenance is None else provenance.verdict,
                    "evidence": None if provenance is None else provenance.evidence,
                },
            )
        except Exception as error:
            _write("recorder_errors", {"test": _test_id(), "error": repr(error)})
        return outcome

    core.repair_statement = repair_statement

    checker = getattr(core, "check_aggregates", None)
    if checker is None:
        return

    def check_aggregates(guard, raw, sql, parameters, rows):
        outcome = checker(guard, raw, sql, parameters, rows)
        try:
            if outcome is not None:
                _write(
                    "aggregates",
                    {
                        "test": _test_id(),
                        "sql": sql[:4000],
                        "confirmed": bool(outcome.findings),
                        "findings": [
                            [f.function, f.argument, list(f.repeated), list(f.repeating), f.factor]
                            for f in outcome.findings
                        ],
                        "decision": [outcome.decision.rule, outcome.decision.applied, outcome.decision.reason],
                    },
                )
        except Exception as error:
            _write("recorder_errors", {"test": _test_id(), "error": repr(error)})
        return outcome

    core.check_aggregates = check_aggregates


try:
    _unittest_hooks()
except Exception as error:
    _write("recorder_errors", {"where": "unittest hooks", "error": repr(error)})
if _MODE in ("observe", "patch"):
    _guard()
'''


# --------------------------------------------------------------------------------------------------
# Projects
# --------------------------------------------------------------------------------------------------


@dataclass
class Project:
    """One project under test: its sdist, how to install its tests' needs, how to run them."""

    name: str
    requirement: str
    """What ``pip download`` asks for (pinned, so that reruns measure the same code)."""
    sdist_name: str
    """The distribution name as pip spells it for ``--no-binary``."""
    extra_requirements: list[str]
    command: Callable[[Path, Path, argparse.Namespace], list[str]]
    """(unpacked source, run directory, options) -> argv, run with the source as working directory
    (or its ``tests`` directory for Django)."""
    outcome_source: str
    """``"junit"`` (pytest's --junitxml at RUN/junit.xml) or ``"unittest"`` (the sitecustomize's records)."""
    workdir: Callable[[Path], Path] = lambda source: source
    install_source: bool = True
    notes: list[str] = field(default_factory=list)


def _django_command(source: Path, run: Path, options: argparse.Namespace) -> list[str]:
    apps = DJANGO_APPS if options.django_apps is None else options.django_apps.split()
    if apps == ["all"]:
        apps = []
    return [
        "python",
        "runtests.py",
        "--settings=test_sqlite",
        f"--parallel={options.parallel}",
        "--noinput",
        "--verbosity=1",
        *apps,
    ]


def _pytest_command(paths: list[str], *extra: str) -> Callable[[Path, Path, argparse.Namespace], list[str]]:
    def command(source: Path, run: Path, options: argparse.Namespace) -> list[str]:
        return [
            "python",
            "-m",
            "pytest",
            *paths,
            *extra,
            "-p",
            "no:cacheprovider",
            "-q",
            "--tb=short",
            "-o",
            "junit_logging=no",
            f"--junitxml={run / 'junit.xml'}",
        ]

    return command


PROJECTS: dict[str, Project] = {
    "django": Project(
        name="django",
        requirement="Django==5.2.19",
        sdist_name="django",
        # tests/requirements/py3.txt without what needs a service, a native build or a browser
        # (aiosmtpd, black, geoip2, pylibmc, pymemcache, pywatchman, redis, selenium): the tests that
        # need those skip, in every mode alike.
        extra_requirements=[
            "asgiref>=3.8.1",
            "argon2-cffi>=19.2.0",
            "bcrypt",
            "docutils>=0.19",
            "jinja2>=2.11.0",
            "numpy",
            "Pillow>=6.2.1",
            "PyYAML",
            "sqlparse>=0.3.1",
            "tblib>=1.5.0",
            "tzdata",
        ],
        command=_django_command,
        outcome_source="unittest",
        workdir=lambda source: source / "tests",
    ),
    "sqlite-utils": Project(
        name="sqlite-utils",
        requirement="sqlite-utils==4.2.1",
        sdist_name="sqlite-utils",
        extra_requirements=["pytest", "hypothesis", "cogapp"],
        command=_pytest_command(["tests"]),
        outcome_source="junit",
    ),
    "sqlalchemy": Project(
        name="sqlalchemy",
        requirement="SQLAlchemy==2.1.9",
        sdist_name="sqlalchemy",
        # Its conftest puts the sdist's lib/ first on sys.path (pure Python, no compiled extensions);
        # the dependency group "tests" without pytest-xdist.
        extra_requirements=["pytest>=7.0.0,<10", "typing_extensions>=4.6.0"],
        # The ORM tests (joins, eager loading, DISTINCT); its addopts stop after 250 failures.
        command=_pytest_command(["test/orm"], "--maxfail=1000000"),
        outcome_source="junit",
        install_source=False,
    ),
}


# --------------------------------------------------------------------------------------------------
# Setting up
# --------------------------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_checked(argv: list[str], **kwargs: Any) -> None:
    log("$ " + " ".join(argv))
    subprocess.run(argv, check=True, **kwargs)


def download_and_unpack(project: Project, work: Path) -> Path:
    """The unpacked sdist's directory (downloaded with pip on first use)."""
    sdists = work / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    found = _find_sdist(sdists, project)
    if found is None:
        # Only the project itself from source: its build dependencies may come as wheels.
        run_checked(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                project.sdist_name,
                project.requirement,
                "-d",
                str(sdists),
            ]
        )
        found = _find_sdist(sdists, project)
        if found is None:
            raise SystemExit(f"pip download gave no sdist for {project.requirement}")
    target = work / "src"
    target.mkdir(exist_ok=True)
    with tarfile.open(found) as archive:
        top = archive.getnames()[0].split("/")[0]
        if not (target / top).exists():
            archive.extractall(target, filter="data")
    return target / top


def _find_sdist(directory: Path, project: Project) -> Path | None:
    version = project.requirement.split("==")[1]
    stems = {project.sdist_name.lower(), project.sdist_name.replace("-", "_").lower()}
    for path in sorted(directory.glob("*.tar.gz")):
        if any(path.name.lower() == f"{stem}-{version}.tar.gz" for stem in stems):
            return path
    return None


def make_venv(project: Project, source: Path, work: Path, fresh: bool) -> Path:
    venv = work / f"venv-{project.name}"
    ready = venv / ".app_suites_ready"
    if fresh and venv.exists():
        shutil.rmtree(venv)
    if ready.exists():
        return venv
    run_checked([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    run_checked([*pip, "-e", str(REPO)])
    sources = [str(source)] if project.install_source else []
    run_checked([*pip, *sources, *project.extra_requirements])
    ready.write_text("ok\n")
    return venv


def write_sitecustomize(work: Path) -> Path:
    hook = work / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE.lstrip(), encoding="utf-8")
    return hook


SELF_CHECK = """
import sqlite3
con = sqlite3.connect(":memory:")
con.executescript(
    "create table a (id integer primary key, name text);"
    "create table b (id integer primary key, a_id integer references a (id));"
    "insert into a values (1, 'x'), (2, 'y');"
)
con.executemany("insert into b (a_id) values (?)", [(1,)] * 10 + [(2,)] * 10)
print(con.execute("select a.id, a.name from a join b on b.a_id = a.id").fetchall())
"""


def self_check(venv: Path, hook: Path, work: Path) -> None:
    """Run one statement P1 must patch (a join fanning out its parent, 20 rows for 2) through the same
    sitecustomize in patch mode, and fail unless the recorder saw the patch: zero patches in a suite
    must not come from a recorder that does not record."""
    out = work / "runs" / "self-check"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(hook), "GS_BENCH_MODE": "patch", "GS_BENCH_OUT": str(out)}
    printed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", SELF_CHECK], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    applied = [record for record in _records(out, "repairs") if record["action"] == "distinct_injected"]
    logged = [record for record in _records(out, "log") if "distinct_injected" in record["message"]]
    if printed != "[(1, 'x'), (2, 'y')]" or len(applied) != 1 or len(logged) != 1:
        raise SystemExit(f"self-check failed: printed {printed!r}, recorded {applied}, logged {logged}")
    log(f"self-check: P1 recorded ({applied[0]['provenance']}: {applied[0]['evidence']})")


# --------------------------------------------------------------------------------------------------
# Running and reading the results
# --------------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    project: str
    mode: str
    commit: str
    """guarded_sqlite's commit when the run started (``+dirty`` with uncommitted changes to its code)."""
    seconds: float
    returncode: int
    outcomes: dict[str, str]
    details: dict[str, str]
    repairs: list[dict[str, Any]]
    aggregates: list[dict[str, Any]]
    logs: list[dict[str, Any]]
    recorder_errors: list[dict[str, Any]]
    tail: str


def run_suite(project: Project, mode: str, source: Path, venv: Path, hook: Path, work: Path, options: Any) -> RunResult:
    run = work / "runs" / label(project, options) / mode
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTEST_ADDOPTS", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        PYTHONPATH=str(hook),
        GS_BENCH_MODE=mode,
        GS_BENCH_OUT=str(run),
        PYTHONDONTWRITEBYTECODE="1",
    )
    if project.outcome_source == "unittest":
        env["GS_BENCH_OUTCOMES"] = "1"
    argv = project.command(source, run, options)
    commit = current_commit()
    log(f"{project.name} [{mode}] at guarded_sqlite {commit}: {' '.join(argv)}")
    started = time.perf_counter()
    with open(run / "output.txt", "w", encoding="utf-8") as output:
        completed = subprocess.run(
            argv, cwd=project.workdir(source), env=env, stdout=output, stderr=subprocess.STDOUT, check=False
        )
    seconds = time.perf_counter() - started
    tail = (run / "output.txt").read_text(encoding="utf-8", errors="replace")[-3000:]
    log(f"{project.name} [{mode}]: exit {completed.returncode} after {seconds:.0f} s")
    if project.outcome_source == "junit":
        outcomes, details = read_junit(run / "junit.xml")
    else:
        outcomes, details = read_unittest_outcomes(_records(run, "outcomes"))
    return RunResult(
        project.name,
        mode,
        commit,
        seconds,
        completed.returncode,
        outcomes,
        details,
        _records(run, "repairs"),
        _records(run, "aggregates"),
        _records(run, "log"),
        _records(run, "recorder_errors"),
        tail,
    )


def label(project: Project, options: Any) -> str:
    """The project's name in results and run directories: with ``--tag``, ``NAME-TAG``."""
    return f"{project.name}-{options.tag}" if options.tag else project.name


def current_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()

    dirty = git("status", "--porcelain", "--", "guarded_sqlite")
    return git("log", "-1", "--format=%h") + ("+dirty" if dirty else "")


def _records(run: Path, kind: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted(run.glob(f"{kind}-*.jsonl")):
        with open(path, encoding="utf-8") as lines:
            records.extend(json.loads(line) for line in lines if line.strip())
    return records


_SEVERITY = {"error": 5, "fail": 4, "xpass": 3, "pass": 2, "xfail": 1, "skip": 0}


def _merge(outcomes: dict[str, str], details: dict[str, str], test: str, outcome: str, detail: str | None) -> None:
    old = outcomes.get(test)
    if old is None or _SEVERITY[outcome] > _SEVERITY[old]:
        outcomes[test] = outcome
        if detail:
            details[test] = detail


def read_unittest_outcomes(records: Iterable[dict[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    outcomes: dict[str, str] = {}
    details: dict[str, str] = {}
    for record in records:
        _merge(outcomes, details, record["test"], record["outcome"], record.get("detail"))
    return outcomes, details


def read_junit(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    outcomes: dict[str, str] = {}
    details: dict[str, str] = {}
    if not path.exists():
        return outcomes, details
    for case in ET.parse(path).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        outcome, detail = "pass", None
        for child in case:
            if child.tag == "failure":
                outcome, detail = "fail", (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "error":
                outcome, detail = "error", (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "skipped":
                outcome = "xfail" if child.get("type") == "pytest.xfail" else "skip"
                detail = child.get("message")
        _merge(outcomes, details, test, outcome, detail[-4000:] if detail else None)
    return outcomes, details


def pytest_test_key(nodeid: str | None) -> str | None:
    """A pytest node id as junit's ``classname::name``."""
    if nodeid is None or "::" not in nodeid:
        return nodeid
    parts = nodeid.split("::")
    module = parts[0].removesuffix(".py").replace("/", ".")
    return f"{'.'.join([module, *parts[1:-1]])}::{parts[-1]}"


def compare(plain: RunResult, guarded: RunResult) -> list[dict[str, Any]]:
    changed = []
    for test in sorted(set(plain.outcomes) | set(guarded.outcomes)):
        before, after = plain.outcomes.get(test, "missing"), guarded.outcomes.get(test, "missing")
        if before != after:
            changed.append(
                {"test": test, "plain": before, guarded.mode: after, "detail": guarded.details.get(test, "")[-2500:]}
            )
    return changed


def summarise(result: RunResult, plain: RunResult | None, junit_keys: bool) -> dict[str, Any]:
    counts = collections.Counter(result.outcomes.values())
    changed = compare(plain, result) if plain is not None and result is not plain else []
    changed_tests = {entry["test"] for entry in changed}
    applied = []
    internal_errors: list[dict[str, Any]] = []
    refused_p1: collections.Counter[str] = collections.Counter()
    considered: collections.Counter[str] = collections.Counter()
    for record in result.repairs:
        test = pytest_test_key(record.get("test")) if junit_keys else record.get("test")
        for rule, was_applied, reason in record["decisions"]:
            considered[f"{rule} {'applied' if was_applied else 'not applied'}"] += 1
            if rule == "P1" and not was_applied:
                refused_p1[_reason_group(reason, record.get("provenance"))] += 1
        if any("internal error" in reason for _, _, reason in record["decisions"]):
            internal_errors.append({**record, "test": test})
        if record["action"] != "none":
            applied.append({**record, "test": test, "test_changed": test in changed_tests})
    patch_logs = [entry for entry in result.logs if entry["message"].startswith("guarded_sqlite distinct")]
    return {
        "project": result.project,
        "mode": result.mode,
        "commit": result.commit,
        "seconds": round(result.seconds, 1),
        "returncode": result.returncode,
        "tests": len(result.outcomes),
        "outcome_counts": dict(counts),
        "changed": changed,
        "decisions": dict(considered),
        "p1_refused_by_reason": dict(refused_p1),
        "applied": applied,
        # Confirmed fan-outs, and confirmations that could not run (their decision says why); a risk the
        # data does not realise returns nothing, so it is not recorded.
        "aggregates": [
            {**record, "test": pytest_test_key(record.get("test")) if junit_keys else record.get("test")}
            for record in result.aggregates
        ],
        "internal_errors": internal_errors,
        "patch_log_records": len(patch_logs),
        "other_log_records": [entry for entry in result.logs if entry not in patch_logs][:50],
        "recorder_errors": result.recorder_errors[:20],
        "tail": result.tail if not result.outcomes else "",
    }


def _reason_group(reason: str, provenance: str | None) -> str:
    head = reason.split(":")[0].split(" (")[0].strip()
    return f"{head} [provenance {provenance}]" if provenance else head


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def _short(sql: str | None, limit: int = 220) -> str:
    text = " ".join((sql or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"guarded_sqlite commit {summary['commit']}, SQLite {summary['sqlite_version']}, Python {summary['python']}",
        "",
    ]
    for name, runs in summary["projects"].items():
        lines += [f"## {name} ({summary['versions'].get(name, '?')})", ""]
        lines += [
            "| mode | guarded_sqlite | time | exit | tests | outcomes | changed vs plain | P1/P2 applied "
            "| P1 refused |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for mode, run in runs.items():
            counts = ", ".join(f"{k} {v}" for k, v in sorted(run["outcome_counts"].items()))
            lines.append(
                f"| {mode} | {run.get('commit', '?')} | {run['seconds']:.0f} s | {run['returncode']} | {run['tests']} "
                f"| {counts} | "
                f"{len(run['changed']) if mode != 'plain' else '-'} | {len(run['applied'])} | "
                f"{sum(run['p1_refused_by_reason'].values())} |"
            )
        lines.append("")
        for mode, run in runs.items():
            if mode == "plain":
                continue
            if run["changed"]:
                lines += [f"Changed outcomes under {mode}:", ""]
                for entry in run["changed"]:
                    lines.append(f"- `{entry['test']}`: {entry['plain']} -> {entry[mode]}")
                lines.append("")
            if run["applied"]:
                lines += [f"Patches applied under {mode}:", ""]
                for record in run["applied"]:
                    ratio = "n/a" if record["dup_ratio"] is None else f"{record['dup_ratio']:.2f}"
                    lines.append(
                        f"- {record['action']} in `{record['test']}` (test changed: {record['test_changed']}): "
                        f"dup_ratio {ratio}, rows {record['rows']} -> {record['final_rows']}, provenance "
                        f"{record['provenance']} ({record['evidence']}); `{_short(record['sql'])}`"
                    )
                lines.append("")
            if run["p1_refused_by_reason"]:
                lines += [f"P1 considered but not applied under {mode}:", ""]
                for reason, count in sorted(run["p1_refused_by_reason"].items(), key=lambda item: -item[1]):
                    lines.append(f"- {count} × {reason}")
                lines.append("")
            confirmed = [record for record in run.get("aggregates", []) if record["confirmed"]]
            if run.get("aggregates"):
                lines += [
                    f"Aggregate fan-out under {mode}: {len(run['aggregates'])} recorded, {len(confirmed)} confirmed:",
                    "",
                ]
                for record in confirmed:
                    found = "; ".join(
                        f"{function}({argument}) counts {', '.join(repeated)} once per row of {', '.join(repeating)}"
                        + ("" if factor is None else f" (factor {factor:.3g})")
                        for function, argument, repeated, repeating, factor in record["findings"]
                    )
                    lines.append(f"- `{record['test']}`: {found}; `{_short(record['sql'], 400)}`")
                for record in run["aggregates"]:
                    if not record["confirmed"] and record["decision"][2]:
                        lines.append(f"- not confirmed in `{record['test']}`: {record['decision'][2]}")
                lines.append("")
            for record in run.get("internal_errors", []):
                reasons = "; ".join(reason for _, _, reason in record["decisions"])
                lines.append(f"- internal error in `{record['test']}`: {reasons}; `{_short(record['sql'])}`")
            if run["decisions"]:
                lines.append(f"All decisions under {mode}: {run['decisions']}")
                lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/guarded_app_suites"))
    parser.add_argument("--projects", default="django,sqlite-utils,sqlalchemy", help="comma-separated, in order")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of plain,observe,patch")
    parser.add_argument(
        "--django-apps",
        default=None,
        help=f"space-separated, or 'all' for the whole suite (default: {' '.join(DJANGO_APPS)})",
    )
    parser.add_argument("--parallel", default="2", help="Django's --parallel (default 2)")
    parser.add_argument("--tag", default="", help="suffix for this configuration's results (e.g. 'all')")
    parser.add_argument("--fresh", action="store_true", help="rebuild the virtualenvs")
    options = parser.parse_args()

    work: Path = options.work.resolve()
    if work == REPO or REPO in work.parents:
        raise SystemExit("--work must lie outside the repository: nothing downloaded belongs in it")
    work.mkdir(parents=True, exist_ok=True)
    hook = write_sitecustomize(work)
    modes = options.modes.split(",")
    summary_path = work / "summary.json"
    summary: dict[str, Any] = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary.setdefault("projects", {})
    summary.setdefault("versions", {})
    summary["commit"] = current_commit()
    summary["python"] = sys.version.split()[0]
    import sqlite3

    summary["sqlite_version"] = sqlite3.sqlite_version

    for name in options.projects.split(","):
        project = PROJECTS[name]
        source = download_and_unpack(project, work)
        venv = make_venv(project, source, work, options.fresh)
        self_check(venv, hook, work)
        key = label(project, options)
        summary["versions"][key] = project.requirement
        results = summary["projects"].setdefault(key, {})
        plain_path = work / "runs" / key / "plain-result.json"
        plain: RunResult | None = None
        for mode in modes:
            result = run_suite(project, mode, source, venv, hook, work, options)
            if mode == "plain":
                plain = result
                plain_path.write_text(json.dumps(result.__dict__, default=repr))
            elif plain is None and plain_path.exists():
                plain = RunResult(**json.loads(plain_path.read_text()))
            results[mode] = summarise(result, plain, project.outcome_source == "junit")
            summary_path.write_text(json.dumps(summary, indent=1, default=repr))
    print(markdown(summary))


if __name__ == "__main__":
    main()
