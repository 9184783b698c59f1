"""The provenance analysis: fixture cases (schema + SQL -> verdict + evidence), API contracts, and
property tests that check its claims against brute-force execution on generated keyed schemas."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlglot
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from guarded_sqlite._analysis.provenance import MAX_SQL_CHARS, Provenance, analyse, analyse_tree
from guarded_sqlite._analysis.schema import SchemaFacts, TableFacts, read_sqlite_schema
from tests.pace import within

FIXTURES = Path(__file__).parent / "fixtures" / "provenance" / "cases.sql"


@dataclass
class Case:
    name: str
    schema: str
    verdict: str
    evidence: str
    sql: str
    reference: str = "both"


def load_cases() -> tuple[dict[str, str], list[Case]]:
    schemas: dict[str, list[str]] = {}
    cases: list[Case] = []
    current_schema = ""
    collecting: list[str] | None = None
    case: Case | None = None
    for line in [*FIXTURES.read_text().splitlines(), ""]:
        if line.startswith("-- schema:"):
            current_schema = line.split(":", 1)[1].strip()
            collecting = schemas.setdefault(current_schema, [])
            case = None
        elif line.startswith("-- case:"):
            name, verdict, evidence = (part.strip() for part in line.split(":", 1)[1].split("|", 2))
            case = Case(name, current_schema, verdict, evidence, "")
            collecting = None
        elif line.startswith("-- reference:") and case is not None:
            case.reference = line.split(":", 1)[1].strip()
        elif line.startswith("--"):
            continue
        elif case is not None:
            if line.strip():
                case.sql += line + "\n"
            elif case.sql:
                cases.append(case)
                case = None
        elif collecting is not None:
            collecting.append(line)
    return {name: "\n".join(lines) for name, lines in schemas.items()}, cases


SCHEMAS, CASES = load_cases()
_FACTS: dict[str, SchemaFacts] = {}


def facts_for(schema: str) -> SchemaFacts:
    if schema not in _FACTS:
        con = sqlite3.connect(":memory:")
        con.executescript(SCHEMAS[schema])
        _FACTS[schema] = read_sqlite_schema(con)
        con.close()
    return _FACTS[schema]


def test_fixture_file_is_well_formed() -> None:
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES), "case names must be unique"
    assert {c.verdict for c in CASES} == {"amplified", "identified", "value_repeats", "unknown"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture_case(case: Case) -> None:
    result = analyse(case.sql.strip(), facts_for(case.schema), reference=case.reference)  # type: ignore[arg-type]
    assert (result.verdict, case.evidence in result.evidence) == (case.verdict, True), result.evidence


# ------------------------------------------------------------------------------------------- API


def test_analyse_tree_reuses_a_parsed_tree_without_changing_it() -> None:
    facts = facts_for("shop")
    sql = "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id"
    tree = sqlglot.parse_one(sql, read="sqlite")
    before = tree.copy()
    assert analyse_tree(tree, facts) == analyse(sql, facts)
    assert tree == before


def test_provenance_fields_and_properties() -> None:
    facts = facts_for("app shapes")
    orm = analyse("SELECT item.id FROM item JOIN tag ON tag.item_id = item.id", facts)
    assert orm.verdict == "identified" and orm.amplification and orm.fanning == ("tag",)
    assert orm.fanning_leading == ("tag",) and orm.reference == ("item",) and orm.projected == ("item",)
    assert "item.(id)" in orm.keys_used
    values = analyse("SELECT note.note FROM item LEFT JOIN note ON item.note_id = note.id", facts)
    assert values.verdict == "value_repeats" and not values.amplification and values.fanning == ()
    assert values.fanning_projected == ("item",) and values.hides_amplification
    country = analyse("SELECT DISTINCT T2.Name FROM country T1 JOIN city T2 ON T2.CountryCode = T1.Code", facts)
    assert country.verdict == "value_repeats" and not country.amplification
    assert country.fanning_leading == ("T2 (city)",) and country.hides_amplification
    single = analyse("SELECT note FROM note", facts)
    assert not single.hides_amplification and not single.amplification


def test_never_raises_on_odd_input() -> None:
    facts = facts_for("shop")
    for sql in ["", ";", "   ", "SELECT", "PRAGMA table_info(x)", "VALUES (1)", "SELECT * FROM (", "\x00", "WITH"]:
        assert isinstance(analyse(sql, facts), Provenance)
    assert analyse("SELECT 1", SchemaFacts()).verdict == "value_repeats"
    assert analyse("SELECT a.x FROM a JOIN b ON b.y = a.x", SchemaFacts()).verdict == "unknown"


def test_huge_sql_is_bounded() -> None:
    facts = facts_for("shop")
    long_sql = "SELECT c.name FROM customers c WHERE " + " OR ".join(["c.id = 1"] * 10_000)
    assert len(long_sql) > MAX_SQL_CHARS
    start = time.perf_counter()
    result = analyse(long_sql, facts)
    assert result.verdict == "unknown" and "longer than" in result.evidence
    many_nodes = "SELECT c.name FROM customers c WHERE " + " OR ".join(f"c.id = {k}" for k in range(1500))
    assert analyse(many_nodes, facts).verdict == "unknown"
    assert within(time.perf_counter() - start, 0, 5)


def test_tables_facts_without_catalog() -> None:
    """The doctest's shape: facts built by hand (no NOT NULL information) still work."""
    facts = SchemaFacts((TableFacts("a", columns=("id", "x"), keys=(frozenset({"id"}),)),))
    assert analyse("SELECT x FROM a", facts).verdict == "value_repeats"
    assert analyse("SELECT id FROM a", facts).verdict == "value_repeats"  # id may be NULL: not identifying


# --------------------------------------------------------------------------------- property tests
#
# Definitions checked by brute force on generated schemas whose data satisfies the declared keys:
# * no multiplication (verdict value_repeats, or identified with nothing fanning, under reference
#   "leading"): the query without DISTINCT returns at most one row per row of the leading table, so its
#   row count is at most the leading table's row count, and each leading row appears at most once;
# * identified: every group of equal result rows comes from one combination of the projected tables'
#   rows (checked by also selecting those tables' rowids and comparing).


@st.composite
def keyed_database(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, list[tuple[int, ...]]]]]:
    """Three tables t0..t2, each with id (INTEGER PRIMARY KEY), a (UNIQUE NOT NULL or plain), b, c."""
    ddl, data = [], []
    for t in range(3):
        unique_a = draw(st.booleans())
        ddl.append(
            f"CREATE TABLE t{t} (id INTEGER PRIMARY KEY, a INTEGER {'NOT NULL UNIQUE' if unique_a else ''}, "
            "b INTEGER, c INTEGER)"
        )
        n = draw(st.integers(0, 6))
        values = st.integers(0, 3)
        a_values = draw(st.permutations(range(10))) if unique_a else [draw(values) for _ in range(n)]
        rows = [(k, a_values[k], draw(values), draw(values)) for k in range(n)]
        data.append((f"t{t}", rows))
    return ddl, data


@st.composite
def join_query(draw: st.DrawFn) -> tuple[str, list[str], list[str]]:
    """A SELECT over 2-3 instances of t0..t2 joined on random column equalities, maybe pinned."""
    count = draw(st.integers(2, 3))
    tables = [f"t{draw(st.integers(0, 2))}" for _ in range(count)]
    aliases = [f"x{k}" for k in range(count)]
    columns = ["id", "a", "b", "c"]
    joins = []
    for k in range(1, count):
        kind = draw(st.sampled_from(["JOIN", "LEFT JOIN", "CROSS JOIN", "JOIN"]))
        if kind == "CROSS JOIN":
            joins.append(f"CROSS JOIN {tables[k]} {aliases[k]}")
            continue
        other = draw(st.integers(0, k - 1))
        left, right = draw(st.sampled_from(columns)), draw(st.sampled_from(columns))
        condition = f"{aliases[k]}.{left} = {aliases[other]}.{right}"
        if draw(st.booleans()):
            condition += f" AND {aliases[k]}.{draw(st.sampled_from(columns))} = {draw(st.integers(0, 3))}"
        joins.append(f"{kind} {tables[k]} {aliases[k]} ON {condition}")
    projected = draw(
        st.lists(st.tuples(st.sampled_from(aliases), st.sampled_from(columns)), min_size=1, max_size=3, unique=True)
    )
    select = ", ".join(f"{a}.{c}" for a, c in projected)
    if count == 3 and draw(st.booleans()):
        # The last two as a parenthesised join group, "x0 JOIN (x1 JOIN x2 ON x2-x1) ON x1-x0", as ORMs
        # write eager loads across a many-to-many.
        outer = draw(st.sampled_from(["JOIN", "LEFT JOIN"]))
        inner = draw(st.sampled_from(["JOIN", "LEFT JOIN", "JOIN"]))
        inner_on = f"x2.{draw(st.sampled_from(columns))} = x1.{draw(st.sampled_from(columns))}"
        if draw(st.booleans()):
            inner_on += f" AND x2.{draw(st.sampled_from(columns))} = {draw(st.integers(0, 3))}"
        outer_on = f"x1.{draw(st.sampled_from(columns))} = x0.{draw(st.sampled_from(columns))}"
        joins = [f"{outer} ({tables[1]} x1 {inner} {tables[2]} x2 ON {inner_on}) ON {outer_on}"]
    sql = f"SELECT {select} FROM {tables[0]} {aliases[0]} " + " ".join(joins)
    return sql, tables, aliases


def _database(ddl: list[str], data: list[tuple[str, list[tuple[int, ...]]]]) -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    for statement in ddl:
        con.execute(statement)
    for table, rows in data:
        con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, ?)", rows)
    return con


_PLAIN_TABLES = [f"CREATE TABLE t{t} (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER, c INTEGER)" for t in range(3)]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keyed_database(), join_query())
@example(  # two NULL-extended x1 rows share the NULL key: not "the same row" (found at 5,000 examples)
    (_PLAIN_TABLES, [("t0", [(0, 0, 0, 0), (1, 0, 0, 0), (2, 0, 0, 0)]), ("t1", []), ("t2", [])]),
    (
        "SELECT x1.id FROM t0 x0 LEFT JOIN t0 x1 ON x1.id = x0.id AND x1.id = 0 CROSS JOIN t0 x2",
        ["t0", "t0", "t0"],
        ["x0", "x1", "x2"],
    ),
)
def test_property_no_multiplication_is_true(
    db: tuple[list[str], list[tuple[str, list[tuple[int, ...]]]]], query: tuple[str, list[str], list[str]]
) -> None:
    ddl, data = db
    sql, _tables, aliases = query
    con = _database(ddl, data)
    facts = read_sqlite_schema(con)
    result = analyse(sql, facts, reference="leading")
    assert result.verdict != "unknown", result.evidence
    event(f"{result.verdict}, fans out: {bool(result.fanning_leading)}")
    if not result.fanning_leading and result.verdict in ("value_repeats", "identified"):
        # id is each table's INTEGER PRIMARY KEY, its rowid (which a parenthesised join group hides).
        with_lead = sql.replace("SELECT ", f"SELECT {aliases[0]}.id, ", 1)
        per_lead = Counter(row[0] for row in con.execute(with_lead))
        assert all(n == 1 for n in per_lead.values()), (sql, result.evidence)
    if result.verdict == "identified":
        rowids = ", ".join(f"{a}.id" for a in aliases if a in {p.split(" ")[0] for p in result.projected})
        select = sql[len("SELECT ") : sql.index(" FROM ")]
        detailed = f"SELECT {select}, {rowids} FROM" + sql.split(" FROM", 1)[1]
        width = select.count(",") + 1
        seen: dict[tuple[object, ...], tuple[object, ...]] = {}
        for row in con.execute(detailed):
            # A NULL id is a row a LEFT JOIN NULL-extended: never the same row as another such row.
            values, identity = tuple(row[:width]), tuple(object() if i is None else i for i in row[width:])
            assert seen.setdefault(values, identity) == identity, (sql, result.evidence)
    con.close()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keyed_database(), join_query())
@example(  # a LEFT JOIN read backwards: a matched x1 fixes x0 through x1.a = x0.id
    (_PLAIN_TABLES, [("t0", [(0, 0, 1, 0), (1, 0, 1, 0)]), ("t1", [(0, 1, 0, 0), (1, 1, 0, 0)]), ("t2", [])]),
    ("SELECT x1.c FROM t0 x0 LEFT JOIN t1 x1 ON x1.a = x0.id", ["t0", "t1"], ["x0", "x1"]),
)
@example(  # x1 is reached forwards and may be the NULL row: its ON does not make x2 a lookup
    (_PLAIN_TABLES, [("t0", [(0, 0, 0, 0)]), ("t1", [(0, 0, 0, 0)]), ("t2", [(0, 0, 0, 0), (1, 0, 0, 0)])]),
    (
        "SELECT x0.b FROM t0 x0 CROSS JOIN t2 x2 LEFT JOIN t1 x1 ON x1.id = x0.id AND x1.b = x2.id",
        ["t0", "t2", "t1"],
        ["x0", "x2", "x1"],
    ),
)
def test_property_no_multiplication_of_the_projected_tables_is_true(
    db: tuple[list[str], list[tuple[str, list[tuple[int, ...]]]]], query: tuple[str, list[str], list[str]]
) -> None:
    """Nothing fans out relative to the projected tables (reference "projected"): each combination of
    their rows appears at most once. A row where a LEFT JOIN NULL-extended one of them is a copy of no
    combination (how ``_closure`` reads a LEFT JOIN backwards from a matched row)."""
    ddl, data = db
    sql, _tables, aliases = query
    con = _database(ddl, data)
    result = analyse(sql, read_sqlite_schema(con), reference="projected")
    assert result.verdict != "unknown", result.evidence
    event(f"{result.verdict}, fans out: {bool(result.fanning_projected)}")
    if not result.fanning_projected:
        projected = [a for a in aliases if a in {p.split(" ")[0] for p in result.projected}]
        with_ids = sql.replace("SELECT ", f"SELECT {', '.join(f'{a}.id' for a in projected)}, ", 1)
        combinations = Counter(row[: len(projected)] for row in con.execute(with_ids))
        assert all(n == 1 for ids, n in combinations.items() if None not in ids), (sql, result.evidence)
    con.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keyed_database(), join_query())
def test_property_reference_both_never_claims_more_than_each_side(
    db: tuple[list[str], list[tuple[str, list[tuple[int, ...]]]]], query: tuple[str, list[str], list[str]]
) -> None:
    ddl, data = db
    sql, _, _ = query
    con = _database(ddl, data)
    facts = read_sqlite_schema(con)
    verdicts = {mode: analyse(sql, facts, reference=mode) for mode in ("leading", "projected", "either", "both")}
    amplified = {mode: p.amplification for mode, p in verdicts.items()}
    assert amplified["both"] == (amplified["leading"] and amplified["projected"])
    assert amplified["either"] == (amplified["leading"] or amplified["projected"])
    con.close()


def test_property_examples_cover_every_verdict() -> None:
    """The generator reaches amplified, identified and value_repeats (so the properties are not vacuous)."""
    con = _database(
        [
            "CREATE TABLE t0 (id INTEGER PRIMARY KEY, a INTEGER NOT NULL UNIQUE, b INTEGER, c INTEGER)",
            "CREATE TABLE t1 (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER, c INTEGER)",
        ],
        [],
    )
    facts = read_sqlite_schema(con)
    shapes = {
        "SELECT x0.b FROM t0 x0 JOIN t1 x1 ON x1.b = x0.id": "amplified",
        "SELECT x0.b FROM t1 x0 LEFT JOIN (t0 x1 JOIN t0 x2 ON x2.id = x1.id) ON x1.a = x0.b": "value_repeats",
        "SELECT x0.b FROM t0 x0 LEFT JOIN (t1 x1 JOIN t0 x2 ON x2.id = x1.id) ON x1.b = x0.id": "amplified",
        "SELECT x0.a FROM t0 x0 JOIN t1 x1 ON x1.b = x0.id": "identified",
        "SELECT x0.b FROM t1 x0 JOIN t0 x1 ON x1.a = x0.b": "value_repeats",
    }
    for sql, verdict in shapes.items():
        assert analyse(sql, facts, reference="leading").verdict == verdict
