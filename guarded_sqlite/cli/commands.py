"""The ``guarded-sqlite`` command line: ``demo``, ``query``, ``mcp``, ``eval`` and ``sweep`` (and ``--version``).

``query DB SQL`` runs one statement through the guard on a SQLite file opened read-only and prints the
rows and the guard report (``cli_query``). ``mcp DB`` serves a SQLite or DuckDB file (or a PostgreSQL
``postgresql://`` URI) to an LLM agent as an MCP server over stdio (``mcp_server``; it needs the
``mcp`` extra and exits 2 naming it without).
``eval`` and ``sweep`` run on the SQLite files, or with ``--engine duckdb|postgres|mysql`` on copies of them
(made on first use, reused while the files are unchanged) with every query transpiled from SQLite;
``--sample`` runs them on the small evaluation sample shipped in the package (``evaluation.sample``)
instead of ``--db-root/--gold/--pred``.

Exit status: 0 on success, 2 for unusable inputs (missing files, a prediction count or db_id that does
not match the gold, bad options, an engine that cannot be reached or copied into, an output path
(``--json``, ``--plot``, ``demo --db``) whose folder is missing or not writable, or that is a directory;
``demo --db`` also refuses an existing file that is not the demo's own database, or is the demo's own
changed since, unless ``--force``), reported on one line ``guarded-sqlite <command>: error: ...``; 1
when ``--plot`` is asked for without matplotlib installed. Output paths are checked before the run
starts. ``query`` exits 1 when its statement fails (an SQL error, or a write: the database is opened
read-only), with the error on one line of stderr, or when its reader closes stdout early; and 2 when DB
is missing, a directory, unreadable or not a SQLite file.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from .._engines import ENGINE_ALIASES, ENGINE_NAMES
from .._version import __version__
from .arguments import int_at_least, non_negative_int, positive_float

_positive_float = positive_float
_positive_int = int_at_least(1)
_non_negative_int = non_negative_int


def _tau_list(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None


PRESET_RULE = (
    "Which preset a command starts from follows who reads its rows: a person or an application gets "
    "patch, the library's default (query, eval, connect()); a model gets text_to_sql, whose answers are "
    "sets (mcp, the agent tools); sweep tunes the paper's own thresholds, so it starts from paper. "
    "--guard overrides it everywhere."
)
"""The one rule for each command's default ``--guard``, printed by ``guarded-sqlite --help``."""


def _presets_among(allowed: Sequence[str], text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in allowed]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"expected one or more of {', '.join(allowed)}, comma-separated, not {text!r}")
    return list(dict.fromkeys(names))


def _preset_list(text: str) -> list[str]:
    from ..evaluation.options import EVAL_GUARDS

    return _presets_among(EVAL_GUARDS, text)


def _sweep_preset_list(text: str) -> list[str]:
    from ..evaluation.options import SWEEP_GUARDS

    return _presets_among(SWEEP_GUARDS, text)


def _add_inputs(command: argparse.ArgumentParser) -> None:
    # Required unless --sample is given; main() checks, since argparse cannot say "these three or that one".
    command.set_defaults(command_parser=command)
    command.add_argument(
        "--sample",
        action="store_true",
        help="run on the small evaluation sample shipped in the package (3 databases, 33 questions) "
        "instead of --db-root/--gold/--pred",
    )
    command.add_argument("--db-root", type=Path, metavar="DIR", help="folder holding <db_id>/<db_id>.sqlite")
    command.add_argument("--gold", type=Path, metavar="FILE", help="BIRD or Spider dev.json, or lines 'SQL<TAB>db_id'")
    command.add_argument(
        "--pred",
        type=Path,
        metavar="FILE",
        help="one SQL per line, BIRD's JSON, or a JSON list/object of index -> SQL",
    )
    command.add_argument("--json", type=Path, metavar="OUT", help="also write the full report as JSON ('-' for stdout)")
    command.add_argument(
        "--timeout",
        type=_positive_float,
        default=5.0,
        metavar="SECONDS",
        help="per-query timeout, enforced by the engine (default: 5; inf: no timeout)",
    )
    command.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        metavar="N",
        help="worker processes (default: the number of CPUs; 1 runs in-process)",
    )
    command.add_argument(
        "--exclude-db",
        action="append",
        default=[],
        metavar="DB_ID",
        help="leave this database's pairs out (repeatable), e.g. an empty one",
    )
    engines = command.add_argument_group(
        "engine",
        "Run on copies of the SQLite databases in DuckDB, PostgreSQL or MySQL/MariaDB instead; copies are made on "
        "first use and reused while the SQLite files are unchanged, and every query is transpiled from SQLite "
        "with sqlglot (a prediction that cannot be transpiled scores 0 and is counted).",
    )
    engines.add_argument(
        "--engine",
        choices=(*ENGINE_NAMES, *ENGINE_ALIASES),
        default="sqlite",
        help="where the queries run (default: sqlite, the files themselves; mariadb is mysql, postgresql postgres)",
    )
    engines.add_argument(
        "--pg-dsn",
        metavar="DSN",
        help="postgres: the server to copy into and run on, as a libpq connection string or URI "
        "(e.g. 'postgresql://user@127.0.0.1:5432/eval'); a user that may create schemas",
    )
    engines.add_argument(
        "--pg-schema-prefix",
        default="spider_",
        metavar="PREFIX",
        help="postgres: each database is copied into schema PREFIX<db_id> (default: spider_)",
    )
    engines.add_argument(
        "--mysql-url",
        metavar="URL",
        help="mysql: the MySQL or MariaDB server to copy into and run on, as mysql://user:password@host:port "
        "(no database: each one is copied into a database of its own); a user that may create databases",
    )
    engines.add_argument(
        "--mysql-db-prefix",
        default="spider_",
        metavar="PREFIX",
        help="mysql: each database is copied into database PREFIX<db_id> (default: spider_)",
    )
    engines.add_argument(
        "--mysql-collation",
        metavar="NAME",
        help="mysql: the utf8mb4 collation of the copies' text (default: the server's, e.g. utf8mb4_general_ci, "
        "which ignores case and trailing spaces; utf8mb4_nopad_bin compares as SQLite does)",
    )
    engines.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="duckdb: folder for the .duckdb copies (default: ~/.cache/guarded_sqlite/duckdb); clickhouse: folder "
        "for the chDB folder of the copies and their records (default: ~/.cache/guarded_sqlite/clickhouse)",
    )


def _add_guard_presets(
    command: argparse.ArgumentParser, presets: Callable[[str], list[str]], default: str, help: str
) -> None:
    # eval's and sweep's --guard: one run per preset named, so the value is a list even with one name.
    command.add_argument("--guard", type=presets, default=[default], metavar="NAME[,NAME...]", help=help)


def _parser() -> argparse.ArgumentParser:
    from ..evaluation.options import ORDERS, RESCUERS, SWEEP_GUARDS
    from .mcp import add_mcp_parser
    from .query import add_query_parser

    parser = argparse.ArgumentParser(
        prog="guarded-sqlite",
        description="Runtime guardrail for machine-written SQL on SQLite.",
        epilog=PRESET_RULE,
    )
    parser.add_argument("--version", action="version", version=f"guarded-sqlite {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="build a small shop database and show a join explosion caught and patched")
    demo.add_argument("--db", type=Path, help="where to create the demo database (default: a temporary file)")
    demo.add_argument(
        "--force",
        action="store_true",
        help="replace the file at --db even if it is not the demo's own database, or is one that was changed "
        "(the demo's own, unchanged, is rebuilt without it)",
    )
    demo.add_argument(
        "--verbose",
        action="store_true",
        help="also print the report's fields: the rule that acted, thresholds, timings",
    )
    add_query_parser(commands)
    add_mcp_parser(commands)

    evaluate = commands.add_parser(
        "eval",
        help="score predictions with Set-EX and Multiset-EX, raw and through the guard",
        description="Score predicted SQL against gold SQL with Set-EX (BIRD's metric) and Multiset-EX, "
        "before and after the guard, with flags, patch fixes/breaks, detector precision and MBS recall.",
    )
    _add_inputs(evaluate)
    _add_guard_presets(
        evaluate,
        _preset_list,
        "patch",
        "guard preset: patch (default: the library's, which the system under test would run), "
        "text_to_sql, paper or observe (probe only); several, comma-separated (e.g. patch,text_to_sql,paper), "
        "print one table with a row per preset",
    )
    rescue = evaluate.add_argument_group(
        "rescue",
        "Replay each flagged prediction with candidate SQLs, letting a rescuer pick one (questions "
        "and BIRD evidence come from the gold JSON). The other options here need --candidates.",
    )
    rescue.add_argument(
        "--candidates",
        type=Path,
        metavar="FILE",
        help="JSON list or object: index (as in the predictions) -> list of candidate SQL strings",
    )
    rescue.add_argument(
        "--order",
        choices=ORDERS,
        default=None,
        help="rescue_first: rescue, then patch the chosen candidate (default); patch_first: the reverse",
    )
    rescue.add_argument(
        "--rescue",
        choices=RESCUERS,
        default=None,
        help="dup_ratio: DupRatioSelector, no model (default); llm: the paper's LLM judge via litellm",
    )
    rescue.add_argument("--llm-model", metavar="MODEL", help="llm: litellm model name, e.g. openai/gpt-4o-mini")
    rescue.add_argument("--llm-api-base", metavar="URL", help="llm: an OpenAI-compatible server's base URL")
    rescue.add_argument("--llm-api-key", metavar="KEY", help="llm: API key (default: $OPENAI_API_KEY)")
    rescue.add_argument(
        "--llm-timeout", type=_positive_float, metavar="SECONDS", help="llm: per-call timeout (default: 10)"
    )

    sweep = commands.add_parser(
        "sweep",
        help="sweep the P1/P2 thresholds: fix/break/net per tau, leave-one-database-out CV",
        description="Replay the predictions a threshold could change through the guard at each tau of a "
        "grid, for P1 (tau_inject) and P2 (tau_remove), and cross-validate the choice by database.",
    )
    _add_inputs(sweep)
    _add_guard_presets(
        sweep,
        _sweep_preset_list,
        "paper",
        f"base preset of the grids, among {', '.join(SWEEP_GUARDS)}: paper (default: the thresholds "
        "swept are the paper's, P1's and P2's), patch or text_to_sql (adds the tau_amplified grid and its CV); "
        "several, comma-separated, run one sweep per preset",
    )
    sweep.add_argument(
        "--plot", type=Path, metavar="OUT.png", help="write a PNG of net gain against tau (needs matplotlib)"
    )
    sweep.add_argument(
        "--p1-taus",
        type=_tau_list,
        default=None,
        metavar="LIST",
        help="comma-separated tau_inject grid (default: 0,0.05,...,0.95)",
    )
    sweep.add_argument(
        "--p2-taus",
        type=_tau_list,
        default=None,
        metavar="LIST",
        help="comma-separated tau_remove grid (default: 0.05,0.10,...,0.50)",
    )
    sweep.add_argument(
        "--amplified-taus",
        type=_tau_list,
        default=None,
        metavar="LIST",
        help="text_to_sql: comma-separated tau_amplified grid (default: 0.05,0.10,...,0.80)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)

    if args.command == "demo":
        from .demo import run

        try:
            if args.db is not None:
                problem = _demo_db_problem(args.db, args.force)
                if problem is not None:
                    _print_error(args.command, f"--db {problem}")
                    return 2
                return run(args.db, where=_demo_db_fate(args.db), verbose=args.verbose)
            with tempfile.TemporaryDirectory() as folder:
                where = "a temporary file, deleted when the demo ends"
                return run(Path(folder) / "shop.db", where=where, kept=False, verbose=args.verbose)
        except BrokenPipeError:  # `demo | head`: as query's below
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    if args.command == "query":
        from .query import run_query

        try:
            return run_query(args, lambda message: _print_error("query", message))
        except BrokenPipeError:
            # The reader closed the pipe (`| head`): stop without a traceback, and without the second
            # BrokenPipeError Python would raise flushing stdout at exit (the recipe in Python's signal docs).
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    if args.command == "mcp":
        from .mcp import run_mcp

        return run_mcp(args, lambda message: _print_error("mcp", message))
    if args.command in ("eval", "sweep"):
        inputs = ("--db-root", "--gold", "--pred")
        given = [option for option in inputs if getattr(args, option[2:].replace("-", "_")) is not None]
        if args.sample and given:
            args.command_parser.error(
                f"--sample cannot be combined with {given[0]} (it replaces --db-root, --gold and --pred)"
            )
        if not args.sample:
            missing = [option for option in inputs if option not in given]
            if missing:
                args.command_parser.error(
                    f"the following arguments are required: {', '.join(missing)} (or --sample for the shipped sample)"
                )
            return _evaluate(args)
        from ..evaluation.sample import sample_inputs

        with sample_inputs() as sample:
            args.db_root, args.gold, args.pred = sample.db_root, sample.gold, sample.pred
            return _evaluate(args)
    parser.error(f"unknown command {args.command}")  # pragma: no cover
    return 2  # pragma: no cover


def _print_error(command: str, message: str) -> None:
    """Report an error on one line of stderr, in argparse's words (without its usage lines)."""
    print(f"guarded-sqlite {command}: error: {message}", file=sys.stderr)


def _demo_db_problem(path: Path, force: bool) -> str | None:
    """Why the demo cannot create its database at ``path``, or None. The demo replaces an existing
    file there, so anything but a regular file (a device such as /dev/null, a FIFO) is refused too, and,
    without ``force``, a file that is not the demo's own database (``demo.replace_refusal``)."""
    from ..evaluation.loaders import output_file_problem
    from .demo import replace_refusal

    problem = output_file_problem(path)
    if problem is None and path.exists() and not path.is_file():
        problem = f"{path}: not a regular file"
    if problem is None and not force:
        refusal = replace_refusal(path)
        if refusal is not None:
            problem = f"{path}: {refusal}"
    return problem


def _demo_db_fate(path: Path) -> str:
    """What the demo is about to do to ``path``, which ``_demo_db_problem`` let through: create it,
    rebuild the demo's unchanged database, or (``--force``) replace another file or a changed one."""
    from .demo import replace_refusal

    try:
        empty = path.stat().st_size == 0
    except FileNotFoundError:
        return "created"
    if empty:
        return "created in the empty file"
    if replace_refusal(path) is None:
        return "rebuilt: it held the demo's database, unchanged"
    return "replaced, as --force asked: it held another database or a changed demo database"


def _evaluate(args: argparse.Namespace) -> int:
    from ..evaluation import evaluate
    from ..evaluation.compare import PresetComparison, compare
    from ..evaluation.loaders import InputError, check_output_file
    from ..evaluation.options import RescueOptions
    from ..evaluation.render import format_comparison, format_eval, format_sweep
    from ..evaluation.report import EvalReport
    from ..evaluation.sweep_report import SweepComparison, SweepReport
    from ..evaluation.thresholds import DEFAULT_P1_TAUS, DEFAULT_P2_TAUS, PlotUnavailable, sweep

    report: EvalReport | SweepReport | PresetComparison | SweepComparison
    engine = {
        "engine": args.engine,
        "pg_dsn": args.pg_dsn,
        "cache_dir": args.cache_dir,
        "pg_schema_prefix": args.pg_schema_prefix,
        "mysql_url": args.mysql_url,
        "mysql_db_prefix": args.mysql_db_prefix,
        "mysql_collation": args.mysql_collation,
    }
    to_stdout = args.json is not None and str(args.json) == "-"
    try:
        # Before the run, which a bad output path would otherwise waste.
        if args.json is not None and not to_stdout:
            check_output_file(args.json, "--json")
        if args.command == "sweep" and args.plot is not None:
            check_output_file(args.plot, "--plot")
        if args.command == "eval":
            options = {
                "timeout": args.timeout,
                "workers": args.workers,
                "exclude_db": args.exclude_db,
                **engine,
                "candidates": args.candidates,
                "rescue_options": RescueOptions(
                    rescue=args.rescue,
                    order=args.order,
                    llm_model=args.llm_model,
                    llm_api_base=args.llm_api_base,
                    llm_api_key=args.llm_api_key,
                    llm_timeout=args.llm_timeout,
                ),
            }
            if len(args.guard) > 1:
                report = compare(args.db_root, args.gold, args.pred, guards=args.guard, **options)
                text = format_comparison(report)
            else:
                report = evaluate(args.db_root, args.gold, args.pred, guard=args.guard[0], **options)
                text = format_eval(report)
        else:
            if args.plot is not None and len(args.guard) > 1:
                raise InputError("--plot draws one sweep: give --guard one preset")
            sweeps = {
                name: sweep(
                    args.db_root,
                    args.gold,
                    args.pred,
                    timeout=args.timeout,
                    workers=args.workers,
                    exclude_db=args.exclude_db,
                    p1_taus=args.p1_taus or DEFAULT_P1_TAUS,
                    p2_taus=args.p2_taus or DEFAULT_P2_TAUS,
                    plot=args.plot,
                    **engine,
                    guard=name,
                    # With several presets the tau_amplified grid is text_to_sql's (the others have none).
                    amplified_taus=args.amplified_taus if len(args.guard) == 1 or name == "text_to_sql" else None,
                )
                for name in args.guard
            }
            texts = {name: format_eval(one.evaluation) + "\n\n" + format_sweep(one) for name, one in sweeps.items()}
            if len(sweeps) == 1:
                (report,) = sweeps.values()
                (text,) = texts.values()
            else:
                report = SweepComparison(sweeps)
                text = "\n\n".join(f"== sweep from the {name} preset ==\n\n{one}" for name, one in texts.items())
    except InputError as error:
        _print_error(args.command, str(error))
        return 2
    except PlotUnavailable as error:
        _print_error(args.command, str(error))
        return 1
    if to_stdout:
        print(report.to_json())
        return 0
    print(text)
    if args.json is not None:
        try:
            args.json.write_text(report.to_json() + "\n", encoding="utf-8")
        except OSError as error:  # checked before the run, but the folder can change meanwhile
            _print_error(args.command, f"--json {args.json}: cannot be written ({error.strerror or error})")
            return 2
        print(f"\nJSON report written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
