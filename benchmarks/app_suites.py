"""What the guard's presets do under real projects' test suites.

Downloads the source distributions of projects that use ``sqlite3`` from PyPI into a work directory
outside the repository: three whose SQL an ORM writes (Django, sqlite-utils, SQLAlchemy's ``test/orm``)
and seven applications with hand-written SQL (coverage.py, IPython, beets, khal, todoman, isso,
diskcache's thread-per-connection FanoutCache). Each gets a throwaway virtualenv of its own with its
test requirements and guarded_sqlite (editable, from ``--guarded-sqlite``, by default this checkout),
and its test suite runs once per mode: plain ``sqlite3``, then ``install(guard=MODE)`` for ``observe``,
``patch`` and ``text_to_sql``. A hook module, imported by a ``.pth`` file in the venv at interpreter
start (subprocesses included), does the install before the project imports anything, and records:

* every statement for which a patch rule (P1/P2) or the aggregate rule was *considered* (wrappers
  around ``guarded_sqlite._guard.decide.repair_statement`` and ``check_aggregates``: SQL, dup ratio, action,
  each decision with its reason, provenance verdict and evidence, the test it ran in), and, for each
  statement whose served rows differ from the fetched ones, the rows before and after, the
  parameters and the application's frames that executed it (where the rows are consumed);
* every ``guarded_sqlite`` log record at INFO or above, and whether the logger, at the level the
  application left it, passed it on to the application's handlers (the hook changes nothing the
  application shows);
* how many statements' rows the guard probed;
* for unittest-based runners (Django's ``runtests.py``), each test's outcome (pytest suites use
  ``--junitxml``).

Then each guarded run's per-test outcomes are compared with the plain run's. Everything downloaded
or produced stays in ``--work`` (default ``/tmp/guarded_app_suites``); a summary goes to
``WORK/summary.json`` and a Markdown report to stdout.

    .venv/bin/python benchmarks/app_suites.py                       # all ten projects, all four modes
    .venv/bin/python benchmarks/app_suites.py --projects apps       # the seven applications
    .venv/bin/python benchmarks/app_suites.py --projects orm --modes plain,observe,patch
    .venv/bin/python benchmarks/app_suites.py --projects todoman --guarded-sqlite ../wt-quiet

Re-running reuses the downloads and the virtualenvs found in ``--work`` (``--fresh`` rebuilds them);
a venv whose guarded_sqlite comes from another checkout than ``--guarded-sqlite`` is re-pointed.
Each run is stopped after its project's timeout (``--timeout`` overrides it).
This is a script, not a test: pytest collects only ``tests`` and ``guarded_sqlite``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
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
MODES = ("plain", "observe", "patch", "text_to_sql")

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

# The hook module put into every project's venv, imported by a .pth file at interpreter start (no
# PYTHONPATH: coverage.py's tests assert there is none, and a sitecustomize.py would shadow the
# project's own). It does nothing unless GS_BENCH_OUT is set, so pip and the project's own tools run
# as before; plain runs import no guarded_sqlite at all.
HOOK_MODULE = "gs_app_suites_hook"
HOOK = r'''
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


def _stack():
    # The application's frames that led to the statement (innermost last), without the guard's, the
    # driver's and this hook's: where to look for the code that consumes the rows.
    import traceback

    import sysconfig

    skip = ("/guarded_sqlite/", "/wrapt/", "/_pytest/", "/pluggy/", "gs_app_suites_hook.py")
    stdlib = sysconfig.get_paths()["stdlib"]
    frames = []
    for frame in traceback.extract_stack()[:-2]:
        name = frame.filename
        if any(part in name for part in skip) or name.startswith(stdlib) or name.startswith("<"):
            continue
        frames.append(f"{name}:{frame.lineno} in {frame.name}")
    return frames[-14:]


def _sample(rows, limit=12):
    if rows is None:
        return None
    return [repr(row)[:300] for row in list(rows)[:limit]]


_counts = {"probed": 0}


def _count_statements():
    # Statements whose rows the guard probed, per process: the proxy and the sqlite3 fast path call
    # core.after_fetch through their own module globals, so both names are wrapped.
    import atexit

    from guarded_sqlite._guard import decide as core

    original = core.after_fetch

    def after_fetch(*args, **kwargs):
        _counts["probed"] += 1
        return original(*args, **kwargs)

    for module_name in ("guarded_sqlite._io.proxy", "guarded_sqlite._io.sqlite_fast"):
        try:
            module = __import__(module_name, fromlist=["after_fetch"])
        except Exception:
            continue
        if getattr(module, "after_fetch", None) is original:
            module.after_fetch = after_fetch
    atexit.register(lambda: _write("counts", dict(_counts)))


def _record_logs():
    # Every guarded_sqlite record at INFO or above is written down, and what the application itself
    # would have shown is unchanged: the logger's level is lowered to INFO (where the application set
    # it higher) so that every such record is made, and a filter on it lets a record through (to its
    # handlers and up to the root's) only where the logger at its own level would have made it. An
    # unset level is the library's own default, INFO. DEBUG records are not made: making them builds
    # normalised SQL (sqlglot imported), which changed how a SIGINT-killed coverage.py subprocess
    # exited. Handlers and propagation stay as they are (pytest's capture handlers, click-log's
    # handler on the root).
    import logging

    logger = logging.getLogger("guarded_sqlite")
    own_level = logger.level or logging.INFO

    def would_have_passed(record):
        return record.levelno >= own_level

    def recorder(record):
        passed = would_have_passed(record)
        try:
            if record.levelno >= logging.INFO:
                _write(
                    "log",
                    {
                        "test": _test_id(),
                        "level": record.levelname,
                        "message": record.getMessage()[:4000],
                        "propagated": passed,
                    },
                )
        except Exception:
            pass
        return passed

    logger.addFilter(recorder)
    logger.setLevel(min(own_level, logging.INFO))


def _guard():
    import inspect

    import guarded_sqlite
    from guarded_sqlite._guard import decide as core

    guarded_sqlite.install(guard=_MODE)
    _write("imported", {"file": guarded_sqlite.__file__, "mode": _MODE})
    _record_logs()
    _count_statements()

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
            changed = rows is not None and list(outcome.rows) != list(rows)
            sql = bound.get("sql")
            provenance = getattr(outcome, "provenance", None)
            _write(
                "repairs",
                {
                    "test": _test_id(),
                    "sql": sql if applied or changed else sql[:1500],
                    "final_sql": outcome.final_sql if applied or changed else None,
                    "parameters": repr(bound.get("parameters"))[:500] if applied or changed else None,
                    "trigger": bound.get("trigger"),
                    "rows": n,
                    "unique": unique,
                    "dup_ratio": (n - unique) / n if n and unique is not None else None,
                    "final_rows": len(outcome.rows),
                    "rows_changed": changed,
                    "rows_before": _sample(rows) if changed else None,
                    "rows_after": _sample(outcome.rows) if changed else None,
                    "stack": _stack() if applied or changed else None,
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
                changed = list(outcome.rows) != list(rows)
                _write(
                    "aggregates",
                    {
                        "test": _test_id(),
                        "sql": sql if changed else sql[:4000],
                        "final_sql": outcome.final_sql if changed else None,
                        "parameters": repr(parameters)[:500] if changed else None,
                        "confirmed": bool(outcome.findings),
                        "findings": [
                            [f.function, f.argument, list(f.repeated), list(f.repeating), f.factor]
                            for f in outcome.findings
                        ],
                        "decision": [outcome.decision.rule, outcome.decision.applied, outcome.decision.reason],
                        "rows": len(rows),
                        "final_rows": len(outcome.rows),
                        "rows_changed": changed,
                        "rows_before": _sample(rows) if changed else None,
                        "rows_after": _sample(outcome.rows) if changed else None,
                        "stack": _stack() if changed or outcome.findings else None,
                    },
                )
        except Exception as error:
            _write("recorder_errors", {"test": _test_id(), "error": repr(error)})
        return outcome

    core.check_aggregates = check_aggregates


if _OUT:
    try:
        _unittest_hooks()
    except Exception as error:
        _write("recorder_errors", {"where": "unittest hooks", "error": repr(error)})
    if _MODE != "plain":
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
    """``"junit"`` (pytest's --junitxml at RUN/junit.xml) or ``"unittest"`` (the hook's records)."""
    workdir: Callable[[Path], Path] = lambda source: source
    install_source: bool = True
    extras: str = ""
    """The project's own extras to install with it (``pip install SOURCE[EXTRAS]``)."""
    editable: bool = False
    """Install the source editable (its tests import the unpacked tree)."""
    prepare: list[list[str]] = field(default_factory=list)
    """Commands run once in the source directory after the install (with the venv first on PATH)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment of every run, as the project's own test configuration sets it (tox.ini)."""
    leftovers: list[str] = field(default_factory=list)
    """Paths in the source directory removed before each run: what a stopped run leaves behind and the
    next one refuses to start with."""
    timeout: int = 1800
    """Seconds a run may take before it is stopped (``--timeout`` overrides)."""
    group: str = "orm"
    """``"orm"`` (the first three, ORM-generated SQL) or ``"app"`` (applications with hand-written SQL)."""
    subset: str = ""
    """What of the suite runs, when not all of it (said in the results)."""


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


# The applications with hand-written SQL (issue 23, item 7). Each one's test requirements are its own
# test extra or dependency group, minus coverage measurement (pytest-cov, codecov) and its addopts'
# plugins that need the cache provider (run with ``-p no:cacheprovider``).
APP_PROJECTS: dict[str, Project] = {
    "coverage": Project(
        name="coverage",
        requirement="coverage==7.17.5",
        sdist_name="coverage",
        # requirements/pytest.txt's pins (pytest 9.2 rejects its pyproject's verbosity_assertions = "5"):
        # pytest-xdist stays installed because the tests' xdist_group markers must be registered (strict
        # markers); the run is serial (-n 0).
        extra_requirements=["pytest==9.1.1", "pytest-xdist==3.8.0", "flaky==3.8.1", "hypothesis==6.170.15", "pygments"],
        # tox.ini's steps: the CTracer built in place, the zipped test modules, the tests from the tree.
        editable=True,
        prepare=[["python", "setup.py", "--quiet", "build_ext", "--inplace"], ["python", "tools/igor.py", "zip_mods"]],
        # Its addopts ask for xdist (-n auto) and --failed-first (the cache provider): replaced.
        command=_pytest_command(["tests"], "-o", "addopts=", "-p", "no:legacypath", "-n", "0"),
        outcome_source="junit",
        env={"PYTHONWARNDEFAULTENCODING": "1", "PYTHON_COLORS": "0"},
        group="app",
    ),
    "ipython": Project(
        name="ipython",
        requirement="ipython==9.18.1",
        sdist_name="ipython",
        extra_requirements=[],
        extras="test",
        # Its addopts (the ipdoctest plugin, the ignores) stay: the whole suite, doctests included.
        command=_pytest_command([]),
        # tests/conftest.py's session fixture makes this directory and removes it when the session ends.
        leftovers=["tmp-ipython-pytest-profiledir"],
        outcome_source="junit",
        group="app",
    ),
    "beets": Project(
        name="beets",
        requirement="beets==2.14.1",
        sdist_name="beets",
        # The dependency group "test" (pip 23 reads no groups) without codecov and pytest-cov; the
        # plugins whose packages are missing skip their tests (requires_import), in every mode alike.
        extra_requirements=[
            "beautifulsoup4",
            "flask",
            "langdetect",
            "pylast",
            "pytest",
            "pytest-factoryboy>=2.8.1",
            "pytest-flask",
            "python-mpd2",
            "python3-discogs-client>=2.3.15",
            "py7zr",
            "pyxdg",
            "rarfile",
            "requests-mock>=1.12.1",
            "requests-oauthlib",
            "responses>=0.3.0",
            "titlecase>=2.4.1,<3",
        ],
        command=_pytest_command(["test"]),
        outcome_source="junit",
        group="app",
    ),
    "khal": Project(
        name="khal",
        requirement="khal==0.14.1",
        sdist_name="khal",
        extra_requirements=[],
        extras="test",
        command=_pytest_command(["tests"]),
        outcome_source="junit",
        group="app",
    ),
    "todoman": Project(
        name="todoman",
        requirement="todoman==4.7.0",
        sdist_name="todoman",
        extra_requirements=["freezegun", "hypothesis", "pytest", "pytz"],
        # Its addopts measure coverage (pytest-cov) and print verbosely: replaced.
        command=_pytest_command(["tests"], "-o", "addopts="),
        outcome_source="junit",
        env={"TZ": "UTC"},  # tox.ini
        group="app",
    ),
    "isso": Project(
        name="isso",
        requirement="isso==0.14.0",
        sdist_name="isso",
        extra_requirements=["pytest"],
        command=_pytest_command(["isso"]),
        outcome_source="junit",
        group="app",
    ),
    # Threads with a connection each (issue 35): its FanoutCache tests hung under the guard while its
    # reference cycles let the cyclic collector finalise one thread's cursor in another.
    "diskcache": Project(
        name="diskcache",
        requirement="diskcache==5.6.3",
        sdist_name="diskcache",
        extra_requirements=["pytest"],
        command=_pytest_command(["tests/test_fanout.py"]),
        outcome_source="junit",
        group="app",
        subset="tests/test_fanout.py (its other modules need Django or run doctests)",
        timeout=900,
    ),
}


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
    **APP_PROJECTS,
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


def make_venv(project: Project, source: Path, work: Path, fresh: bool, library: Path) -> Path:
    venv = work / f"venv-{project.name}"
    ready = venv / ".app_suites_ready"
    if fresh and venv.exists():
        shutil.rmtree(venv)
    if ready.exists():
        return venv
    run_checked([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    run_checked([*pip, "-e", str(library)])
    spec = f"{source}[{project.extras}]" if project.extras else str(source)
    sources = (["-e", spec] if project.editable else [spec]) if project.install_source else []
    run_checked([*pip, *sources, *project.extra_requirements])
    for argv in project.prepare:
        run_checked(argv, cwd=source, env=_venv_env(venv, project))
    ready.write_text("ok\n")
    return venv


def _venv_env(venv: Path, project: Project) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTEST_ADDOPTS", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), **project.env)
    return env


def use_library(venv: Path, library: Path) -> None:
    """Make the venv's editable guarded_sqlite the checkout at ``library`` (re-installed only when the
    venv's points elsewhere, e.g. after a run with another ``--guarded-sqlite``)."""
    python = str(venv / "bin" / "python")
    where = subprocess.run(
        [python, "-c", "import guarded_sqlite; print(guarded_sqlite.__file__)"],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    ).stdout.strip()
    if Path(where).resolve().parent.parent != library:
        run_checked([python, "-m", "pip", "install", "-q", "-e", str(library)])


def install_hook(venv: Path) -> None:
    """(Re)write the hook module and its .pth file into the venv's site-packages. The .pth is named to
    come after the editable installs' own (``__editable__…``), which must put guarded_sqlite on the path
    before the hook imports it."""
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("GS_BENCH")},
    ).stdout.strip()
    (Path(purelib) / f"{HOOK_MODULE}.py").write_text(HOOK.lstrip(), encoding="utf-8")
    (Path(purelib) / f"zz_{HOOK_MODULE}.pth").write_text(f"import {HOOK_MODULE}\n", encoding="utf-8")


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


def self_check(venv: Path, work: Path, library: Path) -> None:
    """Run one statement P1 must patch (a join fanning out its parent, 20 rows for 2) through the same
    hook in patch mode, and fail unless the recorder saw the change, its log record, and the
    guarded_sqlite of ``library``: zero changes in a suite must not come from a recorder that does not
    record, nor from another checkout."""
    out = work / "runs" / "self-check"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    env = {**os.environ, "GS_BENCH_MODE": "patch", "GS_BENCH_OUT": str(out)}
    env.pop("PYTHONPATH", None)
    printed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", SELF_CHECK], env=env, capture_output=True, text=True, check=True, cwd="/"
    ).stdout.strip()
    changed = [record for record in _records(out, "repairs") if record["rows_changed"] and record["action"] != "none"]
    logged = [
        record
        for record in _records(out, "log")
        if record["level"] == "INFO" and any(entry["action"] in record["message"] for entry in changed)
    ]
    imported = [Path(record["file"]).resolve() for record in _records(out, "imported")]
    if (
        printed != "[(1, 'x'), (2, 'y')]"
        or len(changed) != 1
        or len(logged) != 1
        or [path.parent.parent for path in imported] != [library]
    ):
        raise SystemExit(
            f"self-check failed: printed {printed!r}, recorded {changed}, logged {logged}, imported {imported}"
        )
    log(f"self-check: {changed[0]['action']} recorded ({changed[0]['provenance']}: {changed[0]['evidence']})")


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
    probed: int = 0
    """Statements whose rows the guard probed (0 in plain runs)."""
    timed_out: bool = False


def run_suite(project: Project, mode: str, source: Path, venv: Path, work: Path, options: Any) -> RunResult:
    run = work / "runs" / label(project, options) / mode
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    env = _venv_env(venv, project)
    env.update(GS_BENCH_MODE=mode, GS_BENCH_OUT=str(run), PYTHONDONTWRITEBYTECODE="1")
    if project.outcome_source == "unittest":
        env["GS_BENCH_OUTCOMES"] = "1"
    for leftover in project.leftovers:
        shutil.rmtree(source / leftover, ignore_errors=True)
    argv = project.command(source, run, options)
    commit = current_commit(options.guarded_sqlite)
    timeout = options.timeout or project.timeout
    log(f"{project.name} [{mode}] at guarded_sqlite {commit}: {' '.join(argv)}")
    started = time.perf_counter()
    with open(run / "output.txt", "w", encoding="utf-8") as output:
        # A session of its own, so that a run past its timeout is stopped with every process it started.
        process = subprocess.Popen(
            argv, cwd=project.workdir(source), env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = -1
            output.write(f"\n[app_suites] stopped after the timeout of {timeout} s\n")
    seconds = time.perf_counter() - started
    log(f"{project.name} [{mode}]: exit {returncode} after {seconds:.0f} s")
    facts = {"commit": commit, "seconds": seconds, "returncode": returncode, "timed_out": returncode == -1}
    (run / "run.json").write_text(json.dumps(facts))
    return read_run(project, mode, run, facts)


def read_run(project: Project, mode: str, run: Path, facts: dict[str, Any]) -> RunResult:
    """A run's result from what it left in its directory (outcomes, records, output) and ``facts``
    (commit, seconds, returncode, timed_out)."""
    tail = (run / "output.txt").read_text(encoding="utf-8", errors="replace")[-3000:]
    if project.outcome_source == "junit":
        outcomes, details = read_junit(run / "junit.xml")
    else:
        outcomes, details = read_unittest_outcomes(_records(run, "outcomes"))
    return RunResult(
        project.name,
        mode,
        facts["commit"],
        facts["seconds"],
        facts["returncode"],
        outcomes,
        details,
        _records(run, "repairs"),
        _records(run, "aggregates"),
        _records(run, "log"),
        _records(run, "recorder_errors"),
        tail,
        sum(record["probed"] for record in _records(run, "counts")),
        timed_out=facts.get("timed_out", False),
    )


def label(project: Project, options: Any) -> str:
    """The project's name in results and run directories: with ``--tag``, ``NAME-TAG``."""
    return f"{project.name}-{options.tag}" if options.tag else project.name


def current_commit(library: Path = REPO) -> str:
    """The checkout's branch and commit (``+dirty`` with uncommitted changes under ``guarded_sqlite/``)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=library, capture_output=True, text=True, check=False).stdout.strip()

    dirty = "+dirty" if git("status", "--porcelain", "--", "guarded_sqlite") else ""
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    if branch == "HEAD":  # a detached checkout of a branch's commit: the branch that holds it
        branch = "detached " + (git("name-rev", "--name-only", "--no-undefined", "HEAD") or "HEAD")
    head = git("log", "-1", "--format=%h")
    # A branch whose last commits touch only benchmarks or docs runs the library of an older commit.
    library_commit = git("log", "-1", "--format=%h", "--", "guarded_sqlite")
    same = library_commit == head
    return f"{branch} {head}{dirty}" + ("" if same else f" (guarded_sqlite/ of {library_commit})")


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


_NOW = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?")


def normalise_test_id(test: str) -> str:
    """A test id with the date-times in its parameters replaced by ``<now>``: beets parametrises tests
    by the current time, so the same test has another id in each run."""
    return _NOW.sub("<now>", test)


def pytest_test_key(nodeid: str | None) -> str | None:
    """A pytest node id as junit's ``classname::name``."""
    if nodeid is None or "::" not in nodeid:
        return nodeid
    parts = nodeid.split("::")
    module = parts[0].removesuffix(".py").replace("/", ".")
    return f"{'.'.join([module, *parts[1:-1]])}::{parts[-1]}"


def compare(plain: RunResult, guarded: RunResult) -> list[dict[str, Any]]:
    """The tests whose outcomes differ. Ids are compared with their date-times normalised
    (``normalise_test_id``): the tests sharing a normalised id compare as a sorted list of outcomes."""

    def by_id(result: RunResult) -> dict[str, list[tuple[str, str]]]:
        grouped: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
        for test, outcome in result.outcomes.items():
            grouped[normalise_test_id(test)].append((outcome, test))
        return {key: sorted(entries) for key, entries in grouped.items()}

    before_all, after_all = by_id(plain), by_id(guarded)
    changed = []
    for key in sorted(set(before_all) | set(after_all)):
        before, after = before_all.get(key, []), after_all.get(key, [])
        if [outcome for outcome, _ in before] != [outcome for outcome, _ in after]:
            test = after[0][1] if after else before[0][1]
            changed.append(
                {
                    "test": key,
                    "plain": ", ".join(outcome for outcome, _ in before) or "missing",
                    guarded.mode: ", ".join(outcome for outcome, _ in after) or "missing",
                    "detail": guarded.details.get(test, "")[-2500:],
                }
            )
    return changed


def summarise(result: RunResult, plain: RunResult | None, junit_keys: bool) -> dict[str, Any]:
    counts = collections.Counter(result.outcomes.values())
    changed = compare(plain, result) if plain is not None and result is not plain else []
    changed_tests = {entry["test"] for entry in changed}

    def key(record: dict[str, Any]) -> str | None:
        test = pytest_test_key(record.get("test")) if junit_keys else record.get("test")
        return None if test is None else normalise_test_id(test)

    applied = []
    rows_changed = []
    internal_errors: list[dict[str, Any]] = []
    refused_p1: collections.Counter[str] = collections.Counter()
    considered: collections.Counter[str] = collections.Counter()
    for record in result.repairs:
        test = key(record)
        for rule, was_applied, reason in record["decisions"]:
            considered[f"{rule} {'applied' if was_applied else 'not applied'}"] += 1
            if rule == "P1" and not was_applied:
                refused_p1[_reason_group(reason, record.get("provenance"))] += 1
        if any("internal error" in reason for _, _, reason in record["decisions"]):
            internal_errors.append({**record, "test": test})
        if record["action"] != "none":
            applied.append({**record, "test": test, "test_changed": test in changed_tests})
        if record.get("rows_changed"):
            rows_changed.append({**record, "rule": "P1/P2", "test": test, "test_changed": test in changed_tests})
    for record in result.aggregates:
        if record.get("rows_changed"):
            rows_changed.append(
                {**record, "rule": "aggregate", "action": "aggregate_defanned", "test": key(record),
                 "test_changed": key(record) in changed_tests}
            )  # fmt: skip
    levels: collections.Counter[str] = collections.Counter()
    for entry in result.logs:
        levels[
            f"{entry['level']} {_log_kind(entry['message'])}" + ("" if entry.get("propagated", True) else " (held)")
        ] += 1
    return {
        "project": result.project,
        "mode": result.mode,
        "commit": result.commit,
        "seconds": round(result.seconds, 1),
        "returncode": result.returncode,
        "timed_out": result.timed_out,
        "tests": len(result.outcomes),
        "probed": result.probed,
        "outcome_counts": dict(counts),
        "changed": changed,
        "decisions": dict(considered),
        "p1_refused_by_reason": dict(refused_p1),
        "applied": applied,
        "rows_changed": rows_changed,
        # Confirmed fan-outs, and confirmations that could not run (their decision says why); a risk the
        # data does not realise returns nothing, so it is not recorded.
        "aggregates": [{**record, "test": key(record)} for record in result.aggregates],
        "internal_errors": internal_errors,
        "log_records": dict(levels),
        "log_samples": _log_samples(result.logs),
        "recorder_errors": result.recorder_errors[:20],
        "tail": result.tail if not result.outcomes or result.timed_out else "",
    }


def _log_kind(message: str) -> str:
    """``guarded_sqlite empty_result: SELECT …`` -> ``empty_result``."""
    head = message.removeprefix("guarded_sqlite ").split(":")[0]
    return head.split(" (")[0].removesuffix(" left unchanged").strip()


def _log_samples(logs: list[dict[str, Any]], per_kind: int = 3) -> list[dict[str, Any]]:
    """A few records of each level and kind, with their tests: what an application's user would read."""
    seen: collections.Counter[str] = collections.Counter()
    samples = []
    for entry in logs:
        kind = f"{entry['level']} {_log_kind(entry['message'])}"
        if seen[kind] < per_kind:
            seen[kind] += 1
            samples.append(entry)
    return samples


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
        f"Script at {summary['commit']}, SQLite {summary['sqlite_version']}, Python {summary['python']}",
        "",
    ]
    for name, runs in summary["projects"].items():
        lines += [f"## {name} ({summary['versions'].get(name, '?')})", ""]
        lines += [
            "| mode | guarded_sqlite | time | exit | tests | outcomes | changed vs plain | statements probed "
            "| rows changed | P1/P2 applied | P1 refused | log records (INFO+) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for mode, run in runs.items():
            counts = ", ".join(f"{k} {v}" for k, v in sorted(run["outcome_counts"].items()))
            logs = ", ".join(f"{v} × {k}" for k, v in sorted(run.get("log_records", {}).items())) or "0"
            exit_code = "timeout" if run.get("timed_out") else run["returncode"]
            lines.append(
                f"| {mode} | {run.get('commit', '?')} | {run['seconds']:.0f} s | {exit_code} | {run['tests']} "
                f"| {counts} | {len(run['changed']) if mode != 'plain' else '-'} | {run.get('probed', 0)} "
                f"| {len(run.get('rows_changed', []))} | {len(run['applied'])} "
                f"| {sum(run['p1_refused_by_reason'].values())} | {logs} |"
            )
        lines.append("")
        for mode, run in runs.items():
            if run.get("tail"):
                lines += [
                    f"Output's end under {mode} (no outcome read, or stopped):",
                    "",
                    "```",
                    run["tail"][-1500:],
                    "```",
                    "",
                ]
            if mode == "plain":
                continue
            if run["changed"]:
                lines += [f"Changed outcomes under {mode}:", ""]
                for entry in run["changed"]:
                    detail = _short(entry.get("detail"), 300)
                    lines.append(
                        f"- `{entry['test']}`: {entry['plain']} -> {entry[mode]}" + (f" ({detail})" if detail else "")
                    )
                lines.append("")
            if run.get("rows_changed"):
                lines += [f"Rows changed under {mode}:", ""]
                for record in run["rows_changed"]:
                    ratio = "n/a" if record.get("dup_ratio") is None else f"{record['dup_ratio']:.2f}"
                    lines.append(
                        f"- {record['action']} in `{record['test']}` (test changed: {record['test_changed']}): "
                        f"dup_ratio {ratio}, rows {record['rows']} -> {record['final_rows']}, provenance "
                        f"{record.get('provenance')} ({record.get('evidence')}); `{_short(record['sql'], 400)}`"
                    )
                    for frame in (record.get("stack") or [])[-4:]:
                        lines.append(f"  - {frame}")
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
            if run.get("log_samples"):
                lines += [f"Log records under {mode} (up to 3 of each kind):", ""]
                for entry in run["log_samples"]:
                    held = "" if entry.get("propagated", True) else " [below the level in force: not shown]"
                    lines.append(f"- {entry['level']} in `{entry['test']}`{held}: `{_short(entry['message'], 300)}`")
                lines.append("")
            if run.get("recorder_errors"):
                lines.append(f"Recorder errors under {mode}: {run['recorder_errors']}")
                lines.append("")
            if run["decisions"]:
                lines.append(f"All decisions under {mode}: {run['decisions']}")
                lines.append("")
    return "\n".join(lines)


def resummarise(summary: dict[str, Any], names: list[str], modes: list[str], work: Path, options: Any) -> None:
    """Summarise again the runs found in ``work`` for ``names`` and ``modes``, each against the plain
    run found as a run would find it. A run without ``run.json`` takes its facts from the summary."""
    for name in names:
        project = PROJECTS[name]
        key = label(project, options)
        results = summary["projects"].setdefault(key, {})
        plain_path = work / "runs" / key / "plain"
        if not plain_path.exists():
            plain_path = work / "runs" / project.name / "plain"
        plain = None
        if plain_path.exists():
            plain = read_run(project, "plain", plain_path, _facts(plain_path, summary, project.name, "plain"))
        for mode in modes:
            run = work / "runs" / key / mode
            if not run.exists():
                continue
            result = read_run(project, mode, run, _facts(run, summary, key, mode))
            results[mode] = summarise(result, plain, project.outcome_source == "junit")


def _facts(run: Path, summary: dict[str, Any], key: str, mode: str) -> dict[str, Any]:
    if (run / "run.json").exists():
        return json.loads((run / "run.json").read_text())  # type: ignore[no-any-return]
    known = summary["projects"].get(key, {}).get(mode, {})
    return {
        "commit": known.get("commit", "?"),
        "seconds": known.get("seconds", 0.0),
        "returncode": known.get("returncode", 0),
        "timed_out": known.get("timed_out", False),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/guarded_app_suites"))
    parser.add_argument(
        "--projects",
        default="orm,apps",
        help=f"comma-separated, in order, from {', '.join(PROJECTS)}; 'orm' stands for "
        f"{','.join(name for name, project in PROJECTS.items() if project.group == 'orm')}, 'apps' for "
        f"{','.join(APP_PROJECTS)} (default: all)",
    )
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}")
    parser.add_argument(
        "--guarded-sqlite",
        type=Path,
        default=REPO,
        help="the guarded_sqlite checkout installed (editable) into every venv, e.g. another worktree "
        "(default: this one)",
    )
    parser.add_argument(
        "--timeout", type=int, default=0, help="seconds per run before it is stopped (default: each project's)"
    )
    parser.add_argument(
        "--django-apps",
        default=None,
        help=f"space-separated, or 'all' for the whole suite (default: {' '.join(DJANGO_APPS)})",
    )
    parser.add_argument("--parallel", default="2", help="Django's --parallel (default 2)")
    parser.add_argument("--tag", default="", help="suffix for this configuration's results (e.g. 'all')")
    parser.add_argument("--fresh", action="store_true", help="rebuild the virtualenvs")
    parser.add_argument(
        "--resummarise",
        action="store_true",
        help="run nothing: summarise the runs already in --work again (after a newer plain run, say)",
    )
    options = parser.parse_args()

    work: Path = options.work.resolve()
    if work == REPO or REPO in work.parents:
        raise SystemExit("--work must lie outside the repository: nothing downloaded belongs in it")
    options.guarded_sqlite = library = options.guarded_sqlite.resolve()
    if not (library / "guarded_sqlite" / "__init__.py").exists():
        raise SystemExit(f"--guarded-sqlite {library}: no guarded_sqlite package there")
    work.mkdir(parents=True, exist_ok=True)
    modes = options.modes.split(",")
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown modes {sorted(unknown)}: pick from {','.join(MODES)}")
    groups = {"orm": [n for n, p in PROJECTS.items() if p.group == "orm"], "apps": list(APP_PROJECTS)}
    names = [name for item in options.projects.split(",") for name in groups.get(item, [item])]
    unknown = set(names) - set(PROJECTS)
    if unknown:
        raise SystemExit(f"unknown projects {sorted(unknown)}: pick from {','.join(PROJECTS)}")
    summary_path = work / "summary.json"
    summary: dict[str, Any] = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary.setdefault("projects", {})
    summary.setdefault("versions", {})
    summary["commit"] = current_commit()
    summary["python"] = sys.version.split()[0]
    import sqlite3

    summary["sqlite_version"] = sqlite3.sqlite_version

    if options.resummarise:
        resummarise(summary, names, modes, work, options)
        summary_path.write_text(json.dumps(summary, indent=1, default=repr))
        print(markdown(summary))
        return
    for name in names:
        project = PROJECTS[name]
        source = download_and_unpack(project, work)
        venv = make_venv(project, source, work, options.fresh, library)
        use_library(venv, library)
        install_hook(venv)
        self_check(venv, work, library)
        key = label(project, options)
        summary["versions"][key] = project.requirement + (f", {project.subset}" if project.subset else "")
        results = summary["projects"].setdefault(key, {})
        plain_path = work / "runs" / key / "plain-result.json"
        if "plain" not in modes and not plain_path.exists():
            # Plain runs do not depend on the guard: a tagged configuration compares with the untagged one's.
            plain_path = work / "runs" / project.name / "plain-result.json"
        plain: RunResult | None = None
        for mode in modes:
            result = run_suite(project, mode, source, venv, work, options)
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
