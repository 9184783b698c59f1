"""The small evaluation sample shipped in the package, so ``eval`` and ``sweep`` run without external data.

Spider and BIRD cannot be redistributed here, so the sample is the project's own: three databases
(``shop``, the demo's schema with more varied orders; ``school``; ``music``), stored as SQL scripts in
``sample_data/``, with 33 questions whose gold SQL is ``sample_data/gold.json`` (Spider's format,
plus a ``kind`` per question) and whose predictions, one per line, are ``sample_data/pred.txt``. The
predictions are what text-to-SQL models get wrong in the ways this library is about:

* ``right``: equivalent to the gold;
* ``fan_out``: a join that repeats each answer once per matching row where the gold has DISTINCT or
  ``IN``: Set-EX passes, Multiset-EX fails, and the guard's P1 patch can fix it;
* ``missing_distinct``: no DISTINCT where values repeat without a join multiplying them (Set-EX passes,
  Multiset-EX fails; ``patch`` and ``text_to_sql`` leave these alone as legitimate value repeats);
* ``keeps_duplicates``: a correct query whose rows legitimately repeat (one per order line): the
  ``paper`` preset's P1 breaks it, ``patch`` and ``text_to_sql`` see value repeats and leave it;
* ``extra_distinct``: a DISTINCT where the gold keeps the duplicates;
* ``aggregate``: a fan-out inside ``sum()``, one wrong number no probe of the rows can see;
* ``empty`` (a wrong literal, or a question whose gold answer is empty too) and ``error``.

``sample_inputs()`` writes the databases, built from the scripts, and the two files into a folder
(a temporary one by default) laid out as ``evaluate`` expects: ``database/<db_id>/<db_id>.sqlite``.
The scripts are text so the sample can be read and reviewed, and built fresh for each run so nothing
depends on a cache being current.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

DB_IDS: tuple[str, ...] = ("shop", "school", "music")
"""The sample's databases; each is ``sample_data/<db_id>.sql``."""

GOLD_FILE = "gold.json"
PRED_FILE = "pred.txt"


@dataclass(frozen=True)
class SampleInputs:
    """Where ``sample_inputs`` put the sample: what ``evaluate``'s first three arguments take."""

    db_root: Path
    """Folder holding ``<db_id>/<db_id>.sqlite`` for each of ``DB_IDS``."""

    gold: Path
    """The gold questions (Spider's ``dev.json`` format, with a ``kind`` per question)."""

    pred: Path
    """The predictions, one SQL per line, in the gold's order."""


def _data(name: str) -> str:
    return resources.files(__package__).joinpath("sample_data").joinpath(name).read_text(encoding="utf-8")


def database_script(db_id: str) -> str:
    """The SQL script that builds the sample's database ``db_id`` (one of ``DB_IDS``)."""
    return _data(f"{db_id}.sql")


def kinds() -> list[str]:
    """Each gold question's ``kind`` (``right``, ``fan_out``, ...), in order."""
    return [str(entry["kind"]) for entry in json.loads(_data(GOLD_FILE))]


def materialise(folder: Path) -> SampleInputs:
    """Build the sample's databases and write its gold and prediction files under ``folder`` (created
    if missing; existing sample files there are replaced)."""
    folder.mkdir(parents=True, exist_ok=True)
    db_root = folder / "database"
    for db_id in DB_IDS:
        target = db_root / db_id / f"{db_id}.sqlite"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        con = sqlite3.connect(target)
        try:
            con.executescript(database_script(db_id))
        finally:
            con.close()
    gold, pred = folder / GOLD_FILE, folder / PRED_FILE
    gold.write_text(_data(GOLD_FILE), encoding="utf-8")
    pred.write_text(_data(PRED_FILE), encoding="utf-8")
    return SampleInputs(db_root, gold, pred)


@contextmanager
def sample_inputs(folder: Path | None = None) -> Iterator[SampleInputs]:
    """The sample materialised in ``folder``, or in a temporary folder removed on exit.

    >>> from guarded_sqlite.evaluation import evaluate
    >>> with sample_inputs() as sample:
    ...     report = evaluate(sample.db_root, sample.gold, sample.pred, workers=1, progress=False)
    >>> report.n, report.baseline.set_correct > report.baseline.multiset_correct
    (33, True)
    """
    if folder is not None:
        yield materialise(folder)
        return
    with tempfile.TemporaryDirectory(prefix="guarded_sqlite_sample_") as temporary:
        yield materialise(Path(temporary))
