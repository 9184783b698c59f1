"""``trees.forget_positions``: the parser's source positions dropped from the trees the analysis
copies (a copy deep-copied each node's position dict), nothing else changed."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from guarded_sqlite._analysis.sqltree import parse_single
from guarded_sqlite._analysis.trees import forget_positions, release

SQL = (
    "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "WHERE c.id > 3 AND o.note = 'x' GROUP BY c.id ORDER BY 2 DESC LIMIT 5"
)


def _with_meta(tree: exp.Expr) -> list[exp.Expr]:
    return [node for node in tree.walk() if node._meta]


def test_positions_go_and_the_tree_reads_and_copies_the_same() -> None:
    tree = sqlglot.parse_one(SQL, read="sqlite")
    before = tree.sql("sqlite")
    assert _with_meta(tree), "sqlglot no longer records positions: this module's reason is gone"
    copied_before = tree.copy()
    assert forget_positions(tree) is tree
    assert _with_meta(tree) == []
    assert tree.sql("sqlite") == before
    assert tree == copied_before  # equality (the plans' cache keys) ignores metadata
    assert tree.copy().sql("sqlite") == before
    release(tree, copied_before)


def test_other_metadata_and_lists_of_trees() -> None:
    trees = sqlglot.parse("SELECT 1 AS a; SELECT 2 AS b", read="sqlite")
    tagged = trees[0].find(exp.Alias)
    assert tagged is not None
    tagged.meta["mine"] = True  # metadata that is not a position (a comment's sqlglot.meta, say)
    tagged.meta["line"] = 1
    forget_positions(trees)
    assert tagged.meta == {"mine": True, "line": 1}  # kept whole: only a position-only dict goes
    assert all(not _with_meta(tree) for tree in trees[1:])
    release(trees)


def test_the_rules_parse_keeps_no_positions() -> None:
    tree = parse_single(SQL, "sqlite")
    assert isinstance(tree, exp.Select)
    assert _with_meta(tree) == []
    release(tree)


def test_forgetting_is_a_no_op_on_a_tree_without_positions() -> None:
    built = exp.select("a").from_("t")
    text = built.sql()
    forget_positions(forget_positions(built))
    assert built.sql() == text and _with_meta(built) == []
