"""The evaluation's options, checked and resolved before any query runs.

Engine, workers, timeout, the guard policy and the rescue options arrive from ``evaluate``, ``sweep``
or the CLI in the forms users write them; each ``resolve_*`` function checks one of them (an
``InputError`` or a ``ValueError`` naming the bad value) and returns the form the rest of the
evaluation uses.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

from .._engines import ENGINE_ALIASES, ENGINE_NAMES
from .._extras import install_hint
from ..policy import GuardPolicy, GuardSpec, resolve_policy
from .copy_postgres import DEFAULT_PG_SCHEMA_PREFIX
from .loaders import InputError, PathLike

ENGINES = ENGINE_NAMES
"""Where ``evaluate`` can run the queries: the SQLite files, or their DuckDB, PostgreSQL or MySQL/MariaDB copies."""

DEFAULT_MYSQL_DB_PREFIX = "spider_"
"""Prefix of the MySQL/MariaDB database that holds a SQLite database's copy: ``spider_<db_id>``."""

RESCUERS = ("dup_ratio", "llm")
"""``rescue=`` names: ``DupRatioSelector()`` or ``LLMRescue(...)`` built from the ``llm_*`` options."""

ORDERS = ("rescue_first", "patch_first")
"""``order=`` values: rescue then patch the chosen candidate, or patch then rescue."""


@dataclass(frozen=True)
class SweepGrid:
    """The thresholds a sweep replays predictions at."""

    p1: tuple[float, ...]
    """``tau_inject`` values for P1 (DISTINCT injection), each run with P2 off."""

    p2: tuple[float, ...]
    """``tau_remove`` values for P2 (DISTINCT removal), each run with P1 off."""

    amplified: tuple[float, ...] = ()
    """``tau_amplified`` values for the ``"text_to_sql"`` preset's P1 on join amplification below
    ``tau_inject``, each run with P2 off; empty unless the sweep's base preset is ``"text_to_sql"``."""


@dataclass(frozen=True)
class EngineSpec:
    """The engine an evaluation runs on and how to reach it."""

    name: str = "sqlite"
    """``"sqlite"``, ``"duckdb"``, ``"postgres"``, ``"mysql"`` (MySQL or MariaDB) or ``"clickhouse"`` (chDB)."""

    pg_dsn: str | None = None
    """PostgreSQL: the libpq connection string or URI of the server holding the copies."""

    cache_dir: str | None = None
    """DuckDB: the folder of the ``.duckdb`` copies (None: ``copy.default_cache_dir()``); ClickHouse: the
    folder holding the chDB folder of the copies and their records (``copy_clickhouse.clickhouse_folder``)."""

    pg_schema_prefix: str = DEFAULT_PG_SCHEMA_PREFIX
    """PostgreSQL: a database's copy lives in schema ``<prefix><db_id>``."""

    mysql_url: str | None = dataclasses.field(default=None, repr=False)
    """MySQL/MariaDB: the server holding the copies, ``mysql://user:password@host:port`` (left out
    of ``repr``: it may hold a password)."""

    mysql_db_prefix: str = DEFAULT_MYSQL_DB_PREFIX
    """MySQL/MariaDB: a database's copy lives in database ``<prefix><db_id>``."""

    mysql_collation: str | None = None
    """MySQL/MariaDB: the collation of the copies' text (a ``utf8mb4`` one); None: the server's default
    for ``utf8mb4``, as an application's tables would have it."""


SQLITE_ENGINE = EngineSpec()


@dataclass(frozen=True)
class RescueOptions:
    """The candidate-rescue options as the user gave them (``--rescue``, ``--order``, ``--llm-*``).

    None everywhere means "not given"; ``resolve_rescue_policy`` applies the defaults and refuses
    combinations that cannot work.
    """

    rescue: Any = None
    """``"dup_ratio"`` (``DupRatioSelector()``), ``"llm"`` (``LLMRescue`` from the ``llm_*`` fields) or a
    rescuer object/callable; None: ``"dup_ratio"``."""

    order: str | None = None
    """``"rescue_first"`` or ``"patch_first"``; None: ``"rescue_first"``."""

    llm_model: str | None = None
    """``"llm"``: the litellm model name, e.g. ``openai/gpt-4o-mini``."""

    llm_api_base: str | None = None
    """``"llm"``: an OpenAI-compatible server's base URL."""

    llm_api_key: str | None = dataclasses.field(default=None, repr=False)
    """``"llm"``: the API key (None: ``$OPENAI_API_KEY``). Left out of ``repr``."""

    llm_timeout: float | None = None
    """``"llm"``: seconds per call (None: 10)."""

    @property
    def given(self) -> bool:
        """Whether any option was given."""
        return any(getattr(self, field.name) is not None for field in dataclasses.fields(self))

    @property
    def llm_given(self) -> bool:
        """Whether any ``llm_*`` option was given."""
        return any(
            value is not None for value in (self.llm_model, self.llm_api_base, self.llm_api_key, self.llm_timeout)
        )


NO_RESCUE_OPTIONS = RescueOptions()


def resolve_engine(
    engine: str = "sqlite",
    pg_dsn: str | None = None,
    cache_dir: PathLike | None = None,
    pg_schema_prefix: str = DEFAULT_PG_SCHEMA_PREFIX,
    mysql_url: str | None = None,
    mysql_db_prefix: str = DEFAULT_MYSQL_DB_PREFIX,
    mysql_collation: str | None = None,
) -> EngineSpec:
    """Check the engine options (``InputError`` for unusable ones)."""
    name = engine.lower() if isinstance(engine, str) else engine
    name = ENGINE_ALIASES.get(name, name)
    if name not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if name == "postgres" and not pg_dsn:
        raise InputError("engine 'postgres' needs a PostgreSQL connection string (--pg-dsn / pg_dsn=)")
    if name != "postgres" and pg_dsn:
        raise InputError("--pg-dsn / pg_dsn= is only used with engine 'postgres'")
    if name == "mysql" and not mysql_url:
        raise InputError(
            "engine 'mysql' needs the server's address (--mysql-url / mysql_url=), e.g. mysql://root@127.0.0.1:3306"
        )
    if name == "mysql":
        from .copy_mysql import mysql_params

        mysql_params(str(mysql_url))  # a malformed address is refused before anything runs
    if name != "mysql" and (mysql_url or mysql_collation is not None):
        raise InputError(
            "--mysql-url and --mysql-collation (mysql_url=, mysql_collation=) are only used with engine 'mysql'"
        )
    if name not in ("duckdb", "clickhouse") and cache_dir is not None:
        raise InputError("--cache-dir / cache_dir= is only used with engines 'duckdb' and 'clickhouse'")
    if name == "clickhouse":
        try:
            import chdb  # noqa: F401
        except ImportError:
            raise InputError(f"engine 'clickhouse' needs chdb: {install_hint('clickhouse')}") from None
    return EngineSpec(
        name,
        pg_dsn or None,
        None if cache_dir is None else str(cache_dir),
        pg_schema_prefix,
        mysql_url or None,
        mysql_db_prefix,
        mysql_collation,
    )


EVAL_GUARDS = ("patch", "text_to_sql", "paper", "observe")
"""The presets ``evaluate``/``eval --guard`` take (``"off"`` would probe nothing)."""

SWEEP_GUARDS = ("paper", "patch", "text_to_sql")
"""The presets ``sweep``/``sweep --guard`` take as the base policy of its grids; ``"paper"`` first, the default."""


def resolve_eval_policy(guard: GuardSpec) -> GuardPolicy:
    """The policy of the guarded replay: a preset of ``EVAL_GUARDS`` or a ``GuardPolicy``.

    ``guarded_sqlite.policy.resolve_policy`` reads ``guard``; the evaluation only refuses mode ``"off"``.
    """
    policy = resolve_policy(guard)
    if policy.mode == "off":
        raise ValueError(f"guard='off' does not probe anything: evaluate with one of {', '.join(EVAL_GUARDS)}")
    return policy


def resolve_sweep_policy(guard: GuardSpec) -> GuardPolicy:
    """The base policy of a sweep's grids: a preset of ``SWEEP_GUARDS`` or a ``GuardPolicy`` in mode ``"patch"``."""
    policy = resolve_policy(guard)
    if policy.mode != "patch":
        raise ValueError(
            f"a sweep replays patches: its guard must be one of {', '.join(SWEEP_GUARDS)}, not {policy.preset!r}"
        )
    return policy


def resolve_rescue_policy(
    policy: GuardPolicy, candidates: Any, options: RescueOptions = NO_RESCUE_OPTIONS
) -> GuardPolicy:
    """The policy with the evaluation's rescuer and order (``InputError`` for unusable options).

    ``options.rescue``: ``"dup_ratio"`` (default), ``"llm"`` (``LLMRescue(llm_model, ...)``; the key
    defaults to ``$OPENAI_API_KEY``) or a rescuer object/callable. Without ``candidates`` the options
    do nothing, so giving them is refused as a likely mistake.
    """
    if candidates is None:
        if options.given:
            raise InputError(
                "--rescue/--order/--llm-* (rescue=/order=/llm_*=) only apply with --candidates (candidates=)"
            )
        return policy
    order = "rescue_first" if options.order is None else options.order
    if order not in ORDERS:
        raise InputError(f"order must be 'rescue_first' or 'patch_first', not {order!r}")
    rescue = "dup_ratio" if options.rescue is None else options.rescue
    if isinstance(rescue, str):
        rescuer = _named_rescuer(rescue, options)
    else:
        if options.llm_given:
            raise InputError("llm_*= options only apply with rescue='llm'; configure your rescuer object instead")
        if not callable(rescue):
            raise InputError(f"rescue must be 'dup_ratio', 'llm' or a callable rescuer, not {type(rescue).__name__}")
        rescuer = rescue
    return dataclasses.replace(policy, rescue=rescuer, order=order)  # type: ignore[arg-type]  # checked above


def _named_rescuer(name: str, options: RescueOptions) -> Any:
    """The rescuer ``rescue="dup_ratio"`` or ``rescue="llm"`` stands for."""
    if name not in RESCUERS:
        raise InputError(f"rescue must be one of {', '.join(RESCUERS)} or a rescuer, not {name!r}")
    if name == "dup_ratio":
        if options.llm_given:
            raise InputError("--llm-* (llm_*=) options need --rescue llm (rescue='llm')")
        from ..rescue import DupRatioSelector

        return DupRatioSelector()
    if not options.llm_model:
        raise InputError("--rescue llm needs --llm-model (llm_model=), e.g. 'openai/gpt-4o-mini'")
    timeout = options.llm_timeout
    # The call is abandoned after the timeout on a thread join, which cannot wait forever (nor for NaN).
    if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
        raise InputError(f"llm timeout must be a positive, finite number of seconds, not {timeout!r}")
    from ..rescue import LLMRescue

    key = options.llm_api_key if options.llm_api_key is not None else os.environ.get("OPENAI_API_KEY")
    return LLMRescue(
        model=options.llm_model,
        api_base=options.llm_api_base,
        api_key=key,
        timeout=10.0 if timeout is None else float(timeout),
    )


def resolve_workers(workers: int | None) -> int:
    """``workers`` or, when None, the number of CPUs."""
    if workers is None:
        return os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, not {workers!r}")
    return workers


def resolve_timeout(timeout: float | None) -> float | None:
    """A positive number of seconds, or None for no timeout (``float("inf")`` is also no timeout: the
    engines could not set an infinite deadline)."""
    if timeout is None:
        return None
    # NaN fails "> 0" as well.
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    return None if math.isinf(timeout) else float(timeout)
