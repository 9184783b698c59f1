"""SQLAlchemy on top of guarded connections: engines whose creator returns guarded connections, Core
queries, events carrying the guard's report, transactions, inspection, the ORM, and pandas through an
engine.

Each test runs the same calls on a guarded engine and on a plain sqlite3 one over the same data and
compares the results. Any warning fails the run (``filterwarnings = error``, and ``no_warnings``
records them explicitly). Skipped when SQLAlchemy is not installed; the pandas round trip also needs
pandas.
"""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import GuardedConnection, GuardedCursor

sa = pytest.importorskip("sqlalchemy", reason="SQLAlchemy is not installed")
orm = pytest.importorskip("sqlalchemy.orm")

# --------------------------------------------------------------------------------------------------
# SQLAlchemy
# --------------------------------------------------------------------------------------------------


def guarded_engine(path: Path, guard: str, **kwargs: Any) -> sa.Engine:
    return sa.create_engine("sqlite://", creator=lambda: guarded_sqlite.connect(str(path), guard=guard), **kwargs)


def raw_engine(path: Path, **kwargs: Any) -> sa.Engine:
    return sa.create_engine("sqlite://", creator=lambda: sqlite3.connect(str(path)), **kwargs)


metadata = sa.MetaData()
people = sa.Table(
    "people",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(50), nullable=False, unique=True),
    sa.Column("team", sa.String(20)),
    sa.Column("score", sa.Float),
)
tags = sa.Table(
    "tags",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("person_id", sa.ForeignKey("people.id")),
    sa.Column("tag", sa.String(20)),
)


def populate(engine: sa.Engine) -> None:
    """DDL plus an executemany insert and a single insert; every person gets six tags."""
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(people.insert(), [{"name": f"p{i}", "team": f"t{i % 3}", "score": i * 1.5} for i in range(9)])
        conn.execute(sa.insert(tags), [{"person_id": p + 1, "tag": f"tag{k}"} for p in range(9) for k in range(6)])


@pytest.fixture
def engines(tmp_path: Path, mode: str) -> Iterator[tuple[sa.Engine, sa.Engine]]:
    """(sqlite3 engine, guarded engine), both populated the same way through SQLAlchemy."""
    raw, guarded = raw_engine(tmp_path / "raw.db"), guarded_engine(tmp_path / "guarded.db", mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        populate(raw)
        populate(guarded)
    yield raw, guarded
    raw.dispose()
    guarded.dispose()


def test_sqlalchemy_engine_uses_guarded_connections(
    engines: tuple[sa.Engine, sa.Engine], mode: str, no_warnings: list[Any]
) -> None:
    """The pool holds guarded connections; the DBAPI cursors SQLAlchemy executes on carry a guard_report."""
    _, engine = engines
    raw_connection = engine.raw_connection()
    try:
        assert isinstance(raw_connection.driver_connection, GuardedConnection)
        assert raw_connection.driver_connection.guard_policy.mode == mode
        cursor = raw_connection.cursor()
        assert isinstance(cursor, GuardedCursor)
        cursor.execute("SELECT name FROM people WHERE team = ?", ("t1",))
        assert sorted(cursor.fetchall()) == [("p1",), ("p4",), ("p7",)]
        assert cursor.guard_report is not None
        assert cursor.guard_report.sql == "SELECT name FROM people WHERE team = ?"
        assert (cursor.guard_report.probed, cursor.guard_report.rows, cursor.guard_report.trigger) == (True, 3, None)
    finally:
        raw_connection.close()


def test_sqlalchemy_cursor_reports_via_event(
    engines: tuple[sa.Engine, sa.Engine], mode: str, no_warnings: list[Any]
) -> None:
    """An ``after_cursor_execute`` listener sees a guarded cursor with the report for each statement."""
    _, engine = engines
    seen: list[tuple[str, Any]] = []

    def listener(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        assert isinstance(cursor, GuardedCursor)
        seen.append((statement, cursor.guard_report))

    sa.event.listen(engine, "after_cursor_execute", listener)
    try:
        with engine.begin() as conn:
            conn.execute(people.update().where(people.c.team == "t0").values(score=0.0))
            conn.execute(sa.select(people.c.name).where(people.c.score > 3)).all()
            conn.execute(tags.insert(), [{"person_id": 1, "tag": "x"}, {"person_id": 2, "tag": "y"}])
    finally:
        sa.event.remove(engine, "after_cursor_execute", listener)
    assert len(seen) == 3
    for statement, report in seen:
        assert report is not None and report.sql == statement and report.mode == mode
    update, select, insert = (report for _, report in seen)
    assert update.note == "statement returns no rows"
    assert select.probed and select.rows == 4 and select.trigger is None
    assert not insert.probed and "executemany" in (insert.note or "")


def test_sqlalchemy_core_results_match_sqlite3(engines: tuple[sa.Engine, sa.Engine], no_warnings: list[Any]) -> None:
    """Selects (filters, joins, aggregates, bound parameters), updates and deletes give sqlite3's results."""
    statements = [
        sa.select(people).order_by(people.c.id),
        sa.select(people.c.name, people.c.score).where(people.c.team == sa.bindparam("team")).order_by(people.c.name),
        sa.select(people.c.team, sa.func.count(), sa.func.avg(people.c.score))
        .group_by(people.c.team)
        .order_by(people.c.team),
        sa.select(people.c.name, tags.c.tag).join(tags).where(tags.c.tag.in_(["tag1", "tag4"])).order_by(tags.c.id),
        sa.select(people.c.name).where(people.c.name.regexp_match("^p[2-4]$")).order_by(people.c.name),
        sa.text("SELECT name FROM people WHERE score BETWEEN :lo AND :hi ORDER BY id"),
    ]
    params = [{}, {"team": "t2"}, {}, {}, {}, {"lo": 2, "hi": 8}]
    results = []
    for engine in engines:
        with engine.begin() as conn:
            rows = [conn.execute(statement, p).all() for statement, p in zip(statements, params)]
            updated = conn.execute(people.update().where(people.c.score < 5).values(team="low")).rowcount
            deleted = conn.execute(tags.delete().where(tags.c.tag == "tag0")).rowcount
            after = conn.execute(
                sa.select(people.c.team, sa.func.count()).group_by(people.c.team).order_by(people.c.team)
            ).all()
            results.append((rows, updated, deleted, after, conn.scalar(sa.select(sa.func.count()).select_from(tags))))
    assert results[1] == results[0]
    assert results[0][1:3] == (4, 9)


def test_sqlalchemy_exploding_join(engines: tuple[sa.Engine, sa.Engine], mode: str, no_warnings: list[Any]) -> None:
    """A fan-out join through SQLAlchemy: observe returns sqlite3's rows; patch returns the DISTINCT rows
    and the event's report says so."""
    raw, engine = engines
    query = sa.select(people.c.name).join(tags, tags.c.person_id == people.c.id)
    reports: list[Any] = []
    sa.event.listen(engine, "after_cursor_execute", lambda *args: reports.append(args[1].guard_report))
    with engine.connect() as conn:
        got = conn.execute(query).all()
    with raw.connect() as conn:
        expected = conn.execute(query.distinct() if mode == "patch" else query).all()
    assert sorted(got) == sorted(expected)
    assert len(got) == (54 if mode == "observe" else 9)
    assert reports[-1].trigger == "cartesian_explosion"
    assert reports[-1].action == ("none" if mode == "observe" else "distinct_injected")


def test_sqlalchemy_transaction_rollback(engines: tuple[sa.Engine, sa.Engine], no_warnings: list[Any]) -> None:
    """An error inside ``engine.begin()`` rolls the transaction back and raises IntegrityError, as with sqlite3."""
    results = []
    for engine in engines:
        with pytest.raises(sa.exc.IntegrityError) as info:
            with engine.begin() as conn:
                conn.execute(people.insert().values(name="new", team="t9"))
                conn.execute(people.insert().values(name="p1"))  # duplicate name
        with engine.connect() as conn:
            results.append(
                (str(info.value.orig), conn.execute(sa.select(sa.func.count()).select_from(people)).scalar())
            )
    assert results[1] == results[0]
    assert results[0][1] == 9


def test_sqlalchemy_inspection_and_isolation_level(tmp_path: Path, no_warnings: list[Any]) -> None:
    """Reflection (PRAGMA queries) and isolation-level switching work on guarded connections."""
    engine = guarded_engine(tmp_path / "g.db", "patch", isolation_level="AUTOCOMMIT")
    raw = raw_engine(tmp_path / "r.db", isolation_level="AUTOCOMMIT")
    try:
        populate(engine)
        populate(raw)
        inspections = []
        for e in (raw, engine):
            inspector = sa.inspect(e)
            inspections.append(
                (
                    inspector.get_table_names(),
                    [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns("people")],
                    inspector.get_foreign_keys("tags"),
                    inspector.get_unique_constraints("people"),
                )
            )
        assert inspections[1] == inspections[0]
        assert inspections[0][0] == ["people", "tags"]
        levels = []
        for e in (raw, engine):
            with e.connect() as conn:
                dbapi_connection = conn.connection.driver_connection
                levels.append(
                    (guarded_sqlite.unwrap(dbapi_connection).isolation_level, dbapi_connection.in_transaction)
                )
                conn.execute(sa.text("INSERT INTO tags (tag) VALUES ('auto')"))
                levels.append(dbapi_connection.in_transaction)  # AUTOCOMMIT: no transaction left open
            with e.connect().execution_options(isolation_level="SERIALIZABLE") as conn:
                levels.append(guarded_sqlite.unwrap(conn.connection.driver_connection).isolation_level)
        assert levels[3:] == levels[:3] == [(None, False), False, ""]
        with engine.connect() as conn:
            assert isinstance(conn.connection.driver_connection, GuardedConnection)
    finally:
        engine.dispose()
        raw.dispose()


class Base(orm.DeclarativeBase):
    pass


class Author(Base):
    __tablename__ = "authors"
    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    name: orm.Mapped[str]
    books: orm.Mapped[list[Book]] = orm.relationship(back_populates="author", order_by="Book.id")


class Book(Base):
    __tablename__ = "books"
    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    title: orm.Mapped[str]
    author_id: orm.Mapped[int] = orm.mapped_column(sa.ForeignKey("authors.id"))
    author: orm.Mapped[Author] = orm.relationship(back_populates="books")


def test_sqlalchemy_orm_round_trip(tmp_path: Path, mode: str, no_warnings: list[Any]) -> None:
    """ORM sessions: create, flush, relationship loading and queries give what they give on sqlite3."""
    results = []
    for engine in (raw_engine(tmp_path / "r.db"), guarded_engine(tmp_path / "g.db", mode)):
        Base.metadata.create_all(engine)
        with orm.Session(engine) as session:
            for a in range(3):
                session.add(Author(name=f"a{a}", books=[Book(title=f"a{a}-b{b}") for b in range(4)]))
            session.commit()
        with orm.Session(engine) as session:
            authors = session.scalars(sa.select(Author).order_by(Author.name)).all()
            loaded = [(a.id, a.name, [b.title for b in a.books]) for a in authors]
            joined = session.execute(
                sa.select(Author.name, sa.func.count(Book.id)).join(Book).group_by(Author.name).order_by(Author.name)
            ).all()
            book = session.get(Book, 6)
            results.append((loaded, joined, (book.title, book.author.name) if book else None))
        engine.dispose()
    assert results[1] == results[0]
    assert results[0][1] == [("a0", 4), ("a1", 4), ("a2", 4)]


def test_pandas_round_trip_through_sqlalchemy(engines: tuple[sa.Engine, sa.Engine], no_warnings: list[Any]) -> None:
    """DataFrame.to_sql and read_sql_table/read_sql_query on a guarded engine give sqlite3's frames."""
    pd = pytest.importorskip("pandas", reason="pandas is not installed")
    frame = pd.DataFrame({"k": range(20), "v": [f"v{i % 7}" for i in range(20)], "f": [i / 3 for i in range(20)]})
    results = []
    for engine in engines:
        written = frame.to_sql("frame", engine, index=False, chunksize=6)
        table = pd.read_sql_table("frame", engine)
        query = pd.read_sql_query(sa.text("SELECT * FROM frame WHERE k >= :lo ORDER BY k"), engine, params={"lo": 15})
        joined = pd.read_sql(sa.select(people.c.name, people.c.score).order_by(people.c.id), engine)
        results.append((written, table, query, joined))
    assert results[1][0] == results[0][0]
    for got, expected in zip(results[1][1:], results[0][1:]):
        pd.testing.assert_frame_equal(got, expected)
    pd.testing.assert_frame_equal(results[1][1], frame)
    assert len(results[0][2]) == 5
