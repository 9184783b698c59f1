"""The evaluation sample shipped in the package (``guarded_sqlite.evaluation.sample``) and ``--sample``:
its figures are pinned, so a change to the guard that moves them shows up here, and so do the claims
the README makes about it (the Set-EX/Multiset-EX gap, what each preset fixes and breaks)."""

from __future__ import annotations

import fnmatch
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from guarded_sqlite import GuardPolicy
from guarded_sqlite.cli.commands import main
from guarded_sqlite.evaluation import EvalReport, evaluate
from guarded_sqlite.evaluation.sample import DB_IDS, SampleInputs, kinds, materialise, sample_inputs

KINDS = {
    "right",
    "fan_out",
    "missing_distinct",
    "keeps_duplicates",
    "extra_distinct",
    "aggregate",
    "empty",
    "error",
}


@pytest.fixture(scope="module")
def sample() -> Iterator[SampleInputs]:
    with sample_inputs() as inputs:
        yield inputs


@pytest.fixture(scope="module")
def reports(sample: SampleInputs) -> dict[str, EvalReport]:
    return {
        guard: evaluate(sample.db_root, sample.gold, sample.pred, guard=guard, workers=1, progress=False)
        for guard in ("observe", "patch", "text_to_sql", "paper")
    }


def of_kind(kind: str) -> set[int]:
    return {index for index, name in enumerate(kinds()) if name == kind}


def fixed(report: EvalReport) -> set[int]:
    return {p.index for p in report.pairs if p.guarded_multiset and not p.baseline_multiset}


def broken(report: EvalReport) -> set[int]:
    return {p.index for p in report.pairs if p.baseline_multiset and not p.guarded_multiset}


def test_sample_files_are_consistent(sample: SampleInputs) -> None:
    gold = json.loads(sample.gold.read_text(encoding="utf-8"))
    predictions = sample.pred.read_text(encoding="utf-8").splitlines()
    assert len(gold) == len(predictions) == 33
    assert {entry["db_id"] for entry in gold} == set(DB_IDS)
    assert set(kinds()) == KINDS
    for db_id in DB_IDS:
        assert (sample.db_root / db_id / f"{db_id}.sqlite").is_file()
    # Every gold query runs; the predictions fail exactly where the sample says they do.
    for index, (entry, predicted) in enumerate(zip(gold, predictions)):
        with sqlite3.connect(sample.db_root / entry["db_id"] / f"{entry['db_id']}.sqlite") as con:
            con.execute(entry["query"]).fetchall()
            try:
                con.execute(predicted).fetchall()
            except sqlite3.Error:
                assert entry["kind"] == "error", index
            else:
                assert entry["kind"] != "error", index


def test_baseline_shows_the_multiplicity_gap(reports: dict[str, EvalReport]) -> None:
    baseline = reports["observe"].baseline
    assert reports["observe"].n == 33
    assert (baseline.set_correct, baseline.multiset_correct, baseline.errors) == (26, 13, 3)
    assert baseline.set_ex is not None and baseline.multiset_ex is not None
    assert baseline.set_ex > baseline.multiset_ex
    pairs = {p.index: p for p in reports["observe"].pairs}
    mbs = {index for index, p in pairs.items() if p.baseline_set and not p.baseline_multiset}
    # Fan-outs and missing/extra DISTINCTs pass Set-EX and fail Multiset-EX; correct ones pass both.
    assert mbs == of_kind("fan_out") | of_kind("missing_distinct") | of_kind("extra_distinct")
    assert all(pairs[i].baseline_set and pairs[i].baseline_multiset for i in of_kind("right"))
    assert all(not pairs[i].baseline_set for i in of_kind("aggregate") | of_kind("error"))
    # observe reports and changes nothing
    assert reports["observe"].guarded == baseline and not fixed(reports["observe"])


def test_text_to_sql_fixes_every_fan_out_and_breaks_nothing(reports: dict[str, EvalReport]) -> None:
    report = reports["text_to_sql"]
    assert of_kind("fan_out") <= fixed(report)
    # The SUM over a join that repeats each customer once per line item: corrected values served.
    assert of_kind("aggregate") <= fixed(report)
    assert not broken(report)
    assert report.guarded.multiset_correct == 21
    assert (report.rules["P1"].fired, report.rules["P1"].fix, report.rules["P1"].break_) == (7, 7, 0)
    # "Which genres are on the Morning playlist?" without DISTINCT: the join repeats no track (no join
    # copies on the data), the genres repeat across tracks: left alone, as value repeats.
    pairs = {p.index: p for p in report.pairs}
    (genres,) = [i for i in of_kind("missing_distinct") if "genre" in pairs[i].pred_sql]
    assert pairs[genres].action == "none" and pairs[genres].provenance == "amplified"


def test_patch_fixes_the_large_fan_outs_and_leaves_value_repeats(reports: dict[str, EvalReport]) -> None:
    report = reports["patch"]
    pairs = {p.index: p for p in report.pairs}
    large = {i for i in of_kind("fan_out") if (pairs[i].dup_ratio or 0) >= 0.8}
    # Copies removed from all five; four become right. "Which product categories has Chen Wei ordered?"
    # keeps one row per product he bought (two products share a category): the default merges no
    # distinct rows, where the question's answer is a set (text_to_sql's preset serves it).
    assert len(large) == 5 and all(pairs[i].action != "none" for i in large)
    (categories,) = [i for i in large if pairs[i].action == "join_copies_removed"]
    assert "Chen Wei" in pairs[categories].pred_sql and "p.category" in pairs[categories].pred_sql
    assert fixed(report) == large - {categories} and not broken(report)
    assert report.guarded.multiset_correct == 17
    # A one-table result full of repeated values is flagged but left alone (provenance value_repeats).
    keeps = of_kind("keeps_duplicates")
    assert all(pairs[i].trigger == "cartesian_explosion" and pairs[i].action == "none" for i in keeps)
    assert {pairs[i].provenance for i in keeps} == {"value_repeats"}


def test_paper_preset_breaks_the_legitimate_duplicates(reports: dict[str, EvalReport]) -> None:
    report = reports["paper"]
    assert broken(report) == of_kind("keeps_duplicates") and len(broken(report)) == 1
    assert (report.rules["P1"].fired, report.rules["P1"].fix, report.rules["P1"].break_) == (7, 6, 1)


def test_set_ex_changes_only_where_text_to_sql_serves_corrected_aggregates(reports: dict[str, EvalReport]) -> None:
    """DISTINCT patches change multiplicity only; a corrected SUM is a different value, which Set-EX sees."""
    for name, report in reports.items():
        assert report.baseline.set_correct == 26
        assert report.guarded.set_correct == (27 if name == "text_to_sql" else 26)
    pairs = {p.index: p for p in reports["text_to_sql"].pairs}
    (aggregate,) = of_kind("aggregate")
    assert pairs[aggregate].guarded_set and not pairs[aggregate].baseline_set
    flagged = {p.index: p for p in reports["patch"].pairs}[aggregate]
    assert (flagged.trigger, flagged.action) == ("aggregate_fanout", "none")
    # Counted per preset: flagged under both key-based presets, corrected (and a fix) under text_to_sql only.
    rule = reports["text_to_sql"].rules["aggregate"]
    assert (rule.fired, rule.fix, rule.break_) == (1, 1, 0)
    assert reports["patch"].rules["aggregate"].fired == 0 and reports["paper"].flagged.aggregate_fanout == 0
    assert reports["patch"].flagged.aggregate_fanout == reports["text_to_sql"].flagged.aggregate_fanout == 1


# On PostgreSQL the pairs of all three databases run in one process, switching search_path: this also
# checks that the guarded views forget the previous database's catalog (pairs 11 and 14 were "unknown
# table" verdicts before sessions.py did).
@pytest.mark.parametrize("engine", ["duckdb", "postgres"])
def test_the_sample_scores_the_same_on_duckdb_and_postgres(
    sample: SampleInputs, reports: dict[str, EvalReport], request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    # The sample's SQL is portable (no bare columns under GROUP BY), so no gold query is excluded there.
    options: dict[str, Any]
    if engine == "duckdb":
        pytest.importorskip("duckdb")
        options = {"engine": "duckdb", "cache_dir": tmp_path / "duckdb"}
    else:
        options = {
            "engine": "postgres",
            "pg_dsn": request.getfixturevalue("pg_dsn"),
            "pg_schema_prefix": request.getfixturevalue("pg_schema_prefix"),
        }
    report = evaluate(
        sample.db_root, sample.gold, sample.pred, guard="text_to_sql", workers=1, progress=False, **options
    )
    assert report.n == 33 and not report.gold_failures
    assert report.baseline.set_correct == 26 and report.baseline.multiset_correct == 13
    assert fixed(report) == fixed(reports["text_to_sql"]) and not broken(report)


def test_cli_eval_sample(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--sample", "--workers", "1", "--guard", "text_to_sql", "--json", "-"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert data["n"] == 33 and data["guard"] == "text_to_sql"
    assert data["baseline"]["multiset_correct"] == 13 and data["guarded"]["multiset_correct"] == 21
    assert main(["eval", "--sample", "--workers", "1", "--guard", "patch,text_to_sql,paper"]) == 0
    table = capsys.readouterr().out
    assert "N=33" in table and "text_to_sql" in table and "7/6/1" in table
    assert "aggregate fanout" in table and "1: 1/1/0" in table


def test_cli_sweep_sample(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sweep", "--sample", "--workers", "1", "--p1-taus", "0.5,0.8", "--p2-taus", "0.1", "--json", "-"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["evaluation"]["n"] == 33
    assert [row["tau"] for row in data["p1"]] == [0.5, 0.8]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sample", "--gold", "gold.json"], "--sample cannot be combined with --gold"),
        (["--db-root", "db"], "required: --gold, --pred (or --sample"),
    ],
)
def test_sample_and_explicit_inputs_exclude_each_other(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    for command in ("eval", "sweep"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, *argv])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_materialise_into_a_folder_twice(tmp_path: Path) -> None:
    first = materialise(tmp_path / "sample")
    second = materialise(tmp_path / "sample")  # replaces, does not append to, the databases
    assert first == second
    with sqlite3.connect(second.db_root / "shop" / "shop.sqlite") as con:
        assert con.execute("SELECT count(*) FROM customers").fetchone() == (8,)
    with sample_inputs(tmp_path / "kept") as kept:
        pass
    assert kept.gold.is_file()  # a folder given by the caller is left in place


def test_sample_data_is_package_data() -> None:
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "guarded_sqlite"
    ]
    folder = root / "guarded_sqlite" / "evaluation" / "sample_data"
    files = sorted(path.relative_to(root / "guarded_sqlite").as_posix() for path in folder.iterdir())
    assert len(files) == len(DB_IDS) + 2
    for name in files:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name


def test_predictions_in_another_order_than_the_gold_are_called_out(
    sample: SampleInputs, reports: dict[str, EvalReport], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Predictions shuffled against their gold (a file of another split, or reordered) score near zero
    with one "no such table" after another; the report and the CLI must say so instead of scoring."""
    assert reports["patch"].warnings == ()  # the sample in its own order: no doubt
    predictions = Path(sample.pred).read_text().splitlines()
    # Each database's predictions moved onto another database's questions: their tables are not there.
    by_db: dict[str, list[int]] = {}
    for index, question in enumerate(json.loads(Path(sample.gold).read_text())):
        by_db.setdefault(question["db_id"], []).append(index)
    rotated = list(predictions)
    groups = list(by_db.values())
    for source, target in zip(groups, groups[1:] + groups[:1]):
        for to, frm in zip(target, source * len(target)):
            rotated[to] = predictions[frm]
    shuffled = tmp_path / "shuffled.sql"
    shuffled.write_text("\n".join(rotated) + "\n")
    with pytest.warns(UserWarning, match="name a table their gold database lacks"):
        report = evaluate(sample.db_root, sample.gold, shuffled, guard="patch", workers=1, progress=False)
    assert len(report.warnings) == 1 and "predictions in the gold file's order" in report.warnings[0]
    with pytest.warns(UserWarning):
        code = main(["eval", "--db-root", str(sample.db_root), "--gold", str(sample.gold), "--pred", str(shuffled)])
    assert code == 0 and capsys.readouterr().out.splitlines()[1].startswith("WARNING: ")


def test_a_gold_file_passed_as_the_predictions_is_called_out(sample: SampleInputs, tmp_path: Path) -> None:
    """The gold's own SQL with each line's database name after a tab (a gold .sql file's format, given
    as --pred by mistake): the tab and the name run as part of the SQL, most lines fail or alias a
    table, and the report must say why rather than score it."""
    predictions = Path(sample.pred).read_text().splitlines()
    questions = json.loads(Path(sample.gold).read_text())
    tagged = tmp_path / "gold_lines.sql"
    tagged.write_text("".join(f"{sql}\t{question['db_id']}\n" for sql, question in zip(predictions, questions)))
    with pytest.warns(UserWarning, match="as a gold file's lines do"):
        report = evaluate(sample.db_root, sample.gold, tagged, guard="patch", workers=1, progress=False)
    assert any("pass the predicted SQL alone" in warning for warning in report.warnings)


def _readme_sample_table() -> dict[str, list[str]]:
    """The docs' table of the sample under each preset (docs/evaluation.md): preset -> its cells."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "evaluation.md").read_text(encoding="utf-8")
    start = readme.index("| preset | Set-EX | Multiset-EX | guarded Set-EX |")
    rows: dict[str, list[str]] = {}
    for line in readme[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_docs_sample_table_is_what_eval_sample_prints(reports: dict[str, EvalReport]) -> None:
    table = _readme_sample_table()
    assert list(table) == ["patch", "text_to_sql", "paper"]
    for preset, cells in table.items():
        report = reports[preset]
        b, g = report.baseline, report.guarded
        assert cells[:4] == [f"{value:.2f}" for value in (b.set_ex, b.multiset_ex, g.set_ex, g.multiset_ex)], preset
        p1 = report.rules["P1"]
        assert cells[4] == f"{p1.fired}/{p1.fix}/{p1.break_}", preset
        aggregate, flagged = report.rules["aggregate"], report.flagged.aggregate_fanout
        if cells[5] == "-":
            assert flagged == 0 and aggregate.fired == 0, preset
        elif cells[5].endswith("flagged, rows as written"):
            assert int(cells[5].split()[0]) == flagged and aggregate.fired == 0, preset
        else:
            assert cells[5] == f"{aggregate.fired}/{aggregate.fix}/{aggregate.break_}", preset


def test_cli_sweep_several_presets(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["sweep", "--sample", "--workers", "1", "--p1-taus", "0.8", "--p2-taus", "0.1"]
    assert main([*argv, "--guard", "paper,text_to_sql", "--amplified-taus", "0.5", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["reports"]) == ["paper", "text_to_sql"]
    # The tau_amplified grid is text_to_sql's alone; each sweep keeps its own operating point.
    assert data["reports"]["paper"]["amplified"] == []
    assert [row["tau"] for row in data["reports"]["text_to_sql"]["amplified"]] == [0.5]
    assert main([*argv, "--guard", "paper,text_to_sql"]) == 0
    out = capsys.readouterr().out
    assert out.index("== sweep from the paper preset ==") < out.index("== sweep from the text_to_sql preset ==")
    with pytest.raises(SystemExit):
        main([*argv, "--guard", "paper,nonsense"])
    assert "expected one or more of paper, patch, text_to_sql" in capsys.readouterr().err
    assert main([*argv, "--guard", "paper,patch", "--plot", str(tmp_path / "x.png")]) == 2
    assert "--plot draws one sweep" in capsys.readouterr().err


def test_each_command_defaults_to_the_preset_the_rule_gives() -> None:
    from guarded_sqlite.cli.commands import PRESET_RULE, _parser

    parser = _parser()
    assert " ".join(PRESET_RULE.split()) in " ".join(parser.format_help().split())
    defaults = {
        command: parser.parse_args(argv).guard
        for command, argv in {
            "query": ["query", "x.db", "SELECT 1"],
            "eval": ["eval", "--sample"],
            "mcp": ["mcp", "x.db"],
            "sweep": ["sweep", "--sample"],
        }.items()
    }
    assert defaults == {"query": "patch", "eval": ["patch"], "mcp": "text_to_sql", "sweep": ["paper"]}
    assert GuardPolicy().preset == "patch"  # connect()'s default, as the rule says


@pytest.mark.parametrize("preset", ["patch", "text_to_sql", "paper"])
def test_the_flagged_line_counts_every_trigger(reports: dict[str, EvalReport], preset: str) -> None:
    # issue 38: "Flagged: 16 (exec_error 3, empty_result 5, cartesian_explosion 7)" left the aggregate
    # fan-out out, so the parts did not sum to the total.
    from guarded_sqlite.evaluation.render import format_eval

    report = reports[preset]
    (line,) = [line for line in format_eval(report).splitlines() if line.startswith("Flagged: ")]
    total, parts = line.removeprefix("Flagged: ").split(" ", 1)
    counts = {name: int(count) for name, count in (part.split(" ") for part in parts.strip("()").split(", "))}
    assert list(counts) == ["exec_error", "empty_result", "cartesian_explosion", "aggregate_fanout"]
    assert sum(counts.values()) == int(total) == report.flagged.total
    assert counts["aggregate_fanout"] == report.flagged.aggregate_fanout
    if preset != "paper":
        assert report.flagged.aggregate_fanout > 0  # the sample holds an aggregate the join inflates
