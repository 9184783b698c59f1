"""``evaluate``: the evaluation's entry point, here so that ``compare`` (which runs it once per preset)
and the package, which re-exports it, both import it from a module below them. Imports nothing heavy:
the machinery loads on the first call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..policy import GuardSpec
    from .loaders import PathLike
    from .options import RescueOptions
    from .report import EvalReport

__all__ = ["evaluate"]


def evaluate(
    db_root: PathLike,
    gold: Any,
    pred: Any,
    guard: GuardSpec = "patch",
    timeout: float | None = 5.0,
    workers: int | None = None,
    exclude_db: Iterable[str] = (),
    progress: bool | None = None,
    engine: str = "sqlite",
    pg_dsn: str | None = None,
    cache_dir: PathLike | None = None,
    pg_schema_prefix: str = "spider_",
    *,
    mysql_url: str | None = None,
    mysql_db_prefix: str = "spider_",
    mysql_collation: str | None = None,
    candidates: Any = None,
    order: str | None = None,
    rescue: Any = None,
    llm_model: str | None = None,
    llm_api_base: str | None = None,
    llm_api_key: str | None = None,
    llm_timeout: float | None = None,
    rescue_options: RescueOptions | None = None,
) -> EvalReport:
    """Score predictions against gold SQL, raw and through the guard, on ``<db_root>/<db_id>/<db_id>.sqlite``.

    ``gold``: a gold file (BIRD or Spider ``dev.json``, or ``SQL<TAB>db_id`` lines) or a sequence of
    ``GoldItem``/``(sql, db_id)``. ``pred``: a prediction file (one SQL per line, BIRD's JSON, or a
    JSON list/object by index) or a sequence of SQL strings. Counts must match and named db_ids must
    agree, else ``InputError``. ``guard``: a preset, ``"patch"`` (default), ``"text_to_sql"``, ``"paper"`` or
    ``"observe"``, or a ``GuardPolicy`` (``compare`` runs several presets side by side).
    ``timeout``: seconds per query, enforced by the engine (None: no limit). ``workers``: processes
    (default: the CPU count; 1 runs in this process). ``exclude_db``: db_ids to leave out.
    ``progress``: draw a bar on stderr (default: when stderr is a terminal).

    ``engine``: ``"sqlite"`` (default: the files themselves), ``"duckdb"`` (copies in ``.duckdb``
    files under ``cache_dir``, default ``~/.cache/guarded_sqlite/duckdb``), ``"postgres"`` (copies
    in schemas ``<pg_schema_prefix><db_id>`` on the server at ``pg_dsn``, a libpq connection string
    or URI) or ``"mysql"`` (also ``"mariadb"``: copies in databases ``<mysql_db_prefix><db_id>`` on
    the server at ``mysql_url``, ``mysql://user:password@host:port``, their text in
    ``mysql_collation``, default the server's for ``utf8mb4``). Copies are made on first use and
    reused while the SQLite file is unchanged; every gold and predicted query is transpiled from
    SQLite with sqlglot, and a prediction that cannot be transpiled scores 0 and is counted in
    ``transpile_errors``. Off SQLite each gold query also runs on the SQLite file, and those whose
    result differs are listed in ``gold_differences`` with their likely cause.

    ``candidates``: a JSON file, list or mapping of index -> list of candidate SQLs (a missing index
    or ``[]``: no rescue for that pair). The guarded replay passes each pair's candidates, with the
    gold's ``question`` and ``evidence`` (BIRD) as question and hint, to ``execute``; candidates are
    transpiled like predictions, and one that cannot be is dropped and counted. ``rescue``:
    ``"dup_ratio"`` (default, ``DupRatioSelector()``), ``"llm"`` (``LLMRescue(llm_model, llm_api_base,
    llm_api_key or $OPENAI_API_KEY, llm_timeout)``) or a rescuer object; ``order``: ``"rescue_first"``
    (default) or ``"patch_first"``. These apply only with ``candidates``; the report's ``rescue``
    section and each pair's ``rescue_*`` fields say what happened. A rescuer object must pickle when
    ``workers`` > 1. ``rescue_options``: the same options as one ``RescueOptions`` (then leave
    ``rescue``, ``order`` and ``llm_*`` out).

    Databases are opened read-only. Gold queries that fail or time out (or cannot be transpiled) are
    excluded from N and listed in ``gold_failures``; failing predictions score 0 and are counted.
    """
    from .options import RescueOptions, resolve_engine
    from .runner import run

    options = RescueOptions(rescue, order, llm_model, llm_api_base, llm_api_key, llm_timeout)
    if rescue_options is not None:
        if options.given:
            raise TypeError("give the rescue options either as rescue_options= or as keywords, not both")
        options = rescue_options
    spec = resolve_engine(engine, pg_dsn, cache_dir, pg_schema_prefix, mysql_url, mysql_db_prefix, mysql_collation)
    report, _ = run(
        db_root,
        gold,
        pred,
        guard,
        timeout,
        workers,
        exclude_db,
        progress,
        engine=spec,
        candidates=candidates,
        rescue=options,
    )
    return report
