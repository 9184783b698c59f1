"""The MariaDB/MySQL rule for search functions the server cannot interrupt (``_analysis.long_calls``,
a23): fixture cases, served and refused, and a property over nested arguments."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guarded_sqlite._analysis.long_calls import MAX_LITERAL_CHARS, mysql_long_call

SERVED = [
    "SELECT 1",
    "SELECT name FROM customers WHERE name LIKE '%lima%'",
    "SELECT LOCATE('x', name), INSTR(name, 'y'), POSITION('z' IN name) FROM customers",
    "SELECT REPLACE(LOWER(TRIM(name)), ' ', '') LIKE '%a%' FROM customers",
    "SELECT CONCAT(first, ' ', last) LIKE '%ann%' FROM people",
    "SELECT * FROM customers WHERE name REGEXP '^A' OR name RLIKE 'b$'",
    "SELECT REGEXP_REPLACE(name, 'a', 'b'), REGEXP_SUBSTR(name, 'x'), REGEXP_INSTR(name, 'y') FROM c",
    "SELECT SUBSTRING_INDEX(email, '@', -1) FROM c",
    "SELECT x FROM (SELECT LOWER(name) AS x FROM c) AS d WHERE x LIKE 'a%'",
    "SELECT * FROM (SELECT name FROM c UNION SELECT title FROM b) AS u WHERE name LIKE 'a%'",
    "WITH t AS (SELECT * FROM c) SELECT LOCATE('a', name) FROM t",
    "SELECT LOCATE('a', CAST(name AS CHAR)), LOCATE('a', CONVERT(name USING utf8mb4)) FROM c",
    "SELECT LOCATE('a', MID(name, 1, 3)), LOCATE('a', IFNULL(name, '')), LOCATE('a', LEFT(name, 2)) FROM c",
    "SELECT COUNT(*) FROM c WHERE LENGTH(REPEAT('a', 10)) > 3",  # REPEAT outside any search call
    "SELECT name FROM c WHERE name LIKE %s",  # a parameter: the caller's value
    "SELECT LOWER(x) AS x FROM c ORDER BY LOCATE('a', x)",
    "SELECT @@version LIKE '%MariaDB%' AS m",
    "SELECT LOCATE('x', MAX(name)) FROM c GROUP BY city",
    "SELECT (SELECT 1 FROM e WHERE e.k LIKE d.x) FROM (SELECT name AS x FROM c) AS d",
    "UPDATE c SET name = REPLACE(name, 'a', 'b') WHERE name LIKE 'x%'",
    "SELECT LOCATE('" + "a" * MAX_LITERAL_CHARS + "', name) FROM c",
]

REFUSED = [
    "SELECT LOCATE(CONCAT(REPEAT('a', 100000), 'b'), CONCAT(REPEAT('a', 1000000), name)) FROM customers",
    "SELECT REPLACE(REPEAT('a', 1000000), 'a', 'bb')",
    "SELECT REPLACE(name, 'a', 'bb') LIKE '%a%' FROM c",  # a REPLACE that lengthens, searched again
    "SELECT LOCATE('a', (SELECT GROUP_CONCAT(name) FROM c))",
    "SELECT LOCATE('a', LPAD(name, 1000000, 'x')) FROM c",
    "SELECT name FROM c WHERE name LIKE CONCAT('%', (SELECT MAX(name) FROM c), '%')",
    "SELECT LOCATE('" + "a" * (MAX_LITERAL_CHARS + 1) + "', name) FROM c",
    "WITH t AS (SELECT CONCAT(name, name) AS name FROM c) SELECT LOCATE('a', name) FROM t",
    "WITH RECURSIVE r (s, n) AS (SELECT 'a', 1 UNION ALL SELECT CONCAT(s, s), n + 1 FROM r WHERE n < 24) "
    "SELECT LOCATE('b', s) FROM r",
    "WITH RECURSIVE r (s, n) AS (SELECT 'a', 1 UNION ALL SELECT s, n + 1 FROM r WHERE n < 24) "
    "SELECT LOCATE('b', s) FROM r",  # a recursive CTE's column is not followed
    "SELECT * FROM (SELECT name FROM c UNION SELECT REPEAT('a', 1000000) UNION SELECT 'x') AS u WHERE name LIKE '%b%'",
    "SELECT LOCATE('a', d.x) FROM c JOIN (SELECT id, CONCAT(a, a) AS x FROM e) AS d ON d.id = c.id",
    "SELECT (SELECT 1 FROM e WHERE e.k LIKE d.x) FROM (SELECT REPEAT('a', 99) AS x) AS d",
    "SELECT REPEAT('a', 1000000) AS x FROM c ORDER BY LOCATE('b', x)",
    "SELECT @x := REPEAT('a', 1000000), LOCATE('b', @x)",  # a user variable: the statement sets it
    "SELECT x FROM (SELECT name AS x FROM c) AS d(x) WHERE REGEXP_REPLACE(HEX(x), 'a', 'b') > ''",
]


@pytest.mark.parametrize("sql", SERVED)
def test_search_functions_over_stored_values_and_short_literals_are_served(sql: str) -> None:
    assert mysql_long_call(sql) is None


@pytest.mark.parametrize("sql", REFUSED)
def test_search_functions_over_values_the_statement_builds_are_named(sql: str) -> None:
    found = mysql_long_call(sql)
    assert found is not None and len(found) <= 200


KEEPING = ["LOWER({})", "UPPER({})", "TRIM({})", "SUBSTRING({}, 1, 5)", "LEFT({}, 3)", "CAST({} AS CHAR)",
           "COALESCE({}, '')", "IF(id > 1, {}, 'x')", "CASE WHEN id = 1 THEN {} ELSE 'y' END", "REPLACE({}, 'ab', 'a')",
           "CONCAT({}, '!')"]  # fmt: skip
BUILDING = ["REPEAT({}, 100000)", "LPAD({}, 100000, 'x')", "RPAD({}, 100000, 'x')", "CONCAT(SPACE(100000), {})",
            "(SELECT GROUP_CONCAT({}) FROM c)", "REPLACE({}, 'a', 'aa')", "HEX({})"]  # fmt: skip
SEARCHES = ["SELECT LOCATE('ab', {}) FROM c", "SELECT {} LIKE '%ab%' FROM c", "SELECT REPLACE({}, 'a', '') FROM c",
            "SELECT REGEXP_SUBSTR({}, 'ab') FROM c", "SELECT SUBSTRING_INDEX({}, ',', 2) FROM c"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    search=st.sampled_from(SEARCHES),
    outer=st.lists(st.sampled_from(KEEPING), max_size=4),
    builder=st.one_of(st.none(), st.sampled_from(BUILDING)),
    inner=st.lists(st.sampled_from(KEEPING), max_size=3),
    through_derived=st.booleans(),
)
def test_one_building_function_anywhere_in_a_search_argument_is_refused(
    search: str, outer: list[str], builder: str | None, inner: list[str], through_derived: bool
) -> None:
    """Size-keeping functions around a stored column are served at any depth; one function that
    builds a longer value, at any depth among them, is refused, also when a derived table makes it
    (where ``CONCAT`` no longer counts as size-keeping)."""
    value = "name"
    for wrapper in inner:
        value = wrapper.format(value)
    if builder is not None:
        value = builder.format(value)
    for wrapper in outer:
        value = wrapper.format(value)
    if through_derived:
        sql = search.format("v").replace(" FROM c", f" FROM (SELECT id, {value} AS v FROM c) AS d")
        grows = builder is not None or any(wrapper.startswith("CONCAT") for wrapper in inner + outer)
    else:
        sql = search.format(value)
        grows = builder is not None
    assert (mysql_long_call(sql) is not None) == grows, sql
