"""README.md's and the docs pages' code, run as written.

Every ```python and ```sh (or ```bash, ```shell)
block of README.md and of every page under docs/ runs in a fresh subprocess (so ``install()``, logging
or environment changes cannot leak into the test session or into the next block), in a fresh temporary
folder, after the blocks before it in the same ``##`` section of README.md, or the same page under docs/
(a block may use what an earlier one in its section made: the Quick start's ``guarded-sqlite demo --db
shop.db`` creates the ``shop.db`` its Python blocks open). Python blocks share one namespace within that
run and are compiled with their file's own name and line numbers, so a failure's traceback points at
the file's line; shell blocks run with bash ``-e`` with the interpreter's folder first on PATH
(``guarded-sqlite`` is the installed one). Blocks fenced with any other language (```text for command
synopses) are not run.

Blocks that are not run are listed in ``skip_reason`` with the reason. The PostgreSQL block gets the
session's throwaway server through ``PG_DSN`` and skips like the other PostgreSQL tests without one;
the MariaDB block, its server through ``MARIADB_HOST`` and ``MARIADB_PORT``, likewise.

What a reader gets (issue 46 item 1): the blocks run with only the optional packages their page names
importable, in Python blocks and in the commands shell blocks start alike (a ``sitecustomize`` on
``PYTHONPATH`` installs a meta-path finder that refuses the others, as a venv without them would). A
page names an extra by writing it in brackets (``[llm]``, ``'guarded-sqlite[duckdb]'``) and a plain
package on a ``pip install`` line (``pip install pandas sqlalchemy``); README.md does so per ``##``
section, a docs page for the whole page. And a ``print(...)`` line's comment is a promise: what the line
prints must start with the comment's text up to the first ": " or " ..." (what follows is the comment's
explanation), so ``print(x)  # 1 1`` fails where it prints ``None None``; a comment in parentheses only
explains.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
SHELL_LANGUAGES = ("sh", "bash", "shell")
RUN_LANGUAGES = frozenset({"python", *SHELL_LANGUAGES})
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,})(?P<lang>[\w+-]*)\s*$")


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # README line of the block's first line of code (the one after the opening fence)
    code: str
    section: str  # the ``##`` heading the block is under (a docs page: the page's path)
    page: str = "README.md"  # the file, relative to the repository
    heading: str = ""  # the nearest ``#`` or ``##`` heading above the block

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}-{self.lang}"


def readme_blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced block of ``text`` in order, with its language, first code line and section. Blocks of
    a docs page all share one section, the page: its headings split a README section's content."""
    blocks: list[Block] = []
    section = "" if page == "README.md" else page
    heading = ""
    opening: re.Match[str] | None = None
    body: list[str] = []
    first = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if opening is None:
            match = FENCE.match(line)
            if match:
                opening, body, first = match, [], number + 1
            elif line.startswith("## ") or line.startswith("# "):
                heading = line.lstrip("#").strip()
                section = heading if page == "README.md" else page
            continue
        if line.strip() == opening["fence"]:
            indent = len(opening["indent"])
            # A block inside a list item is indented with its fence: drop that much, and no more.
            code = "\n".join(part[indent:] if not indent or part[:indent].isspace() else part.lstrip() for part in body)
            blocks.append(Block(opening["lang"].lower(), first, code + "\n", section, page, heading))
            opening = None
        else:
            body.append(line)
    assert opening is None, f"{page}: the block opened before line {first} is never closed"
    return blocks


def skip_reason(block: Block) -> str | None:
    """Why a runnable-looking block is not run here, or None."""
    if block.heading == "Two commands":
        return (
            "README's two top commands set up the environment this test runs in; .ci/run runs both as "
            "written (read by .ci/readme_commands.py; test_ci_runs_readme_two_commands checks that)"
        )
    if block.heading == "Installing":
        return (
            "installs the package from a clone or a wheel it builds (needs the build tool and a writable "
            "site); .ci/run builds the wheel, installs it into a fresh venv and runs the demo from it"
        )
    if "shared/data" in block.code:
        return "needs the Spider/BIRD data in shared/data, which is not part of the repository"
    if needs_chdb(block):
        # chDB is the [clickhouse] extra, not in [test]: CI's ClickHouse step runs it (test_clickhouse.py).
        return "needs chdb (the [clickhouse] extra); tests/engines/test_clickhouse.py runs it"
    return None


def needs_chdb(block: Block) -> bool:
    return "from chdb" in block.code


EXTRA_MODULES = {
    "llm": ("litellm",),
    "plot": ("matplotlib",),
    "duckdb": ("duckdb",),
    "postgres": ("psycopg", "psycopg_binary", "psycopg_c", "psycopg_pool"),
    "mysql": ("pymysql",),
    "mcp": ("mcp",),
    "langchain": ("langchain_core", "langchain"),
    "llama-index": ("llama_index", "sqlalchemy"),  # llama-index-core requires SQLAlchemy and imports it
    "clickhouse": ("chdb",),
}
"""The top-level modules each optional extra of pyproject.toml brings, its own and those of its
dependencies that are optional here too (``[docs]`` brings none a block imports); a test below keeps the
keys in step with pyproject's extras."""
PLAIN_PACKAGES = {"pandas": ("pandas",), "sqlalchemy": ("sqlalchemy",)}
"""Packages no extra brings that a page may need (the test extras have them): named on a ``pip install``
line, by their distribution name in any case."""
OPTIONAL_MODULES = frozenset(m for modules in (*EXTRA_MODULES.values(), *PLAIN_PACKAGES.values()) for m in modules)
_BRACKETS = re.compile(r"\[([a-z][a-z-]*(?:\s*,\s*[a-z][a-z-]*)*)\]")
_PIP_INSTALL = re.compile(r"pip install ([^\n`]*)")


def named_modules(text: str) -> frozenset[str]:
    """The optional modules ``text`` (a page, or a README section) names: an extra in brackets, a plain
    package on a ``pip install`` line; ``[test]`` brings them all."""
    extras = {name.strip() for match in _BRACKETS.finditer(text) for name in match[1].split(",")}
    if "test" in extras:
        return OPTIONAL_MODULES
    modules = {m for extra in extras & EXTRA_MODULES.keys() for m in EXTRA_MODULES[extra]}
    for line in _PIP_INSTALL.findall(text):
        words = {word.strip("'\"").lower() for word in line.split()}
        modules |= {m for package, found in PLAIN_PACKAGES.items() if package in words for m in found}
    return frozenset(modules)


def page_text(block: Block) -> str:
    """The text whose names count for ``block``: its README section, or its whole docs page."""
    text = (ROOT / block.page).read_text(encoding="utf-8")
    if block.page != "README.md":
        return text
    sections = re.split(r"(?m)^(?=## )", text)
    return next(part for part in sections if part.startswith(f"## {block.section}\n") or block.section == "")


# Put first on a child's PYTHONPATH: refuses the optional modules GUARDED_DOCS_HIDDEN lists, as a venv
# without them would (ModuleNotFoundError, which is what the library's own "install the extra" hints catch).
HIDING_SITECUSTOMIZE = r"""
import importlib.abc, os, sys
_HIDDEN = frozenset(filter(None, os.environ.get("GUARDED_DOCS_HIDDEN", "").split(",")))


class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r} (not named on this page)", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


def needs_postgres(block: Block) -> bool:
    return "psycopg.connect" in block.code


def needs_mariadb(block: Block) -> bool:
    return "pymysql.connect" in block.code


BLOCKS = [
    block
    for path in PAGES
    for block in readme_blocks(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
]
RUNNABLE = [block for block in BLOCKS if block.lang in RUN_LANGUAGES]

# Runs a JSON list of blocks in order: python ones in one namespace, compiled as README.md's lines;
# shell ones with bash -e. Stops at the first failure, naming its README line, with exit status 1. A line
# ``print(ARGS)  # PROMISE`` runs as ``__promised__(LINE, "PROMISE", ARGS)``: it prints as print() does and
# fails the block when the text printed does not start with the promise (up to ": " or " ...").
DRIVER = r"""
import io, json, re, subprocess, sys, traceback
readme, shown, blocks = sys.argv[1], sys.argv[2], json.load(sys.stdin)
PROMISE = re.compile(r"^(?P<indent>\s*)print\((?P<args>.*)\)\s*#\s*(?P<promise>.+?)\s*$")


def promised_value(comment):
    for end in (": ", " ..."):
        comment = comment.split(end, 1)[0]
    return comment.strip()


def __promised__(line, promise, *args, **options):
    printed = io.StringIO()
    print(*args, **options, file=printed)
    sys.stdout.write(printed.getvalue())
    value = promised_value(promise)
    if not printed.getvalue().strip().startswith(value):
        raise AssertionError(f"line {line} promises {value!r} (# {promise}) and printed {printed.getvalue()!r}")


def with_promises(code, first):
    lines = code.split("\n")
    for index, text in enumerate(lines):
        match = PROMISE.match(text)
        if match and "#" not in match["args"] and not match["promise"].startswith("("):
            lines[index] = f"{match['indent']}__promised__({first + index}, {match['promise']!r}, {match['args']})"
    return "\n".join(lines)


namespace = {"__name__": "__main__", "__promised__": __promised__}
for block in blocks:
    where = f"{shown}:{block['line']} ({block['lang']} block)"
    sys.stdout.flush()
    if block["shell"]:
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block["code"]])
        if done.returncode != 0:
            print(f"{where} failed: exit status {done.returncode}", file=sys.stderr)
            sys.exit(1)
        continue
    try:
        code = with_promises(block["code"], block["line"])
        exec(compile("\n" * (block["line"] - 1) + code, readme, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"{where} raised", file=sys.stderr)
        sys.exit(1)
"""


def run_blocks(
    blocks: list[Block],
    readme: Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    hidden: frozenset[str] = frozenset(),
) -> None:
    """Run ``blocks`` (of the file ``readme``) in one fresh interpreter in ``cwd``, with the optional
    modules ``hidden`` not importable there nor in the commands it starts; fail naming the line that
    failed."""
    child_env = {**os.environ, **(env or {})}
    child_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), child_env.get("PATH", "")])
    hook = cwd / ".hide-optional"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HIDING_SITECUSTOMIZE, encoding="utf-8")
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), child_env.get("PYTHONPATH", "")]))
    child_env["GUARDED_DOCS_HIDDEN"] = ",".join(sorted(hidden))
    payload = json.dumps(
        [{"lang": b.lang, "line": b.line, "code": b.code, "shell": b.lang in SHELL_LANGUAGES} for b in blocks]
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", DRIVER, str(readme), blocks[-1].page],
        input=payload,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=child_env,
        timeout=300,
    )
    if done.returncode != 0:
        pytest.fail(
            f"{blocks[-1].id}, run after the {len(blocks) - 1} block(s) before it in its section, failed "
            f"(exit status {done.returncode}).\nstdout (end):\n{done.stdout[-3000:]}\nstderr:\n{done.stderr}",
            pytrace=False,
        )


@pytest.mark.parametrize("block", RUNNABLE, ids=[block.id for block in RUNNABLE])
def test_readme_block_runs_as_written(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    reason = skip_reason(block)
    if reason is not None:
        pytest.skip(reason)
    sequence = [
        earlier
        for earlier in RUNNABLE
        if earlier.section == block.section and earlier.line <= block.line and skip_reason(earlier) is None
    ]
    env = {}
    if any(needs_postgres(each) for each in sequence):
        env["PG_DSN"] = request.getfixturevalue("pg_dsn")  # skips (or fails under CI) without a server
    if any(needs_mariadb(each) for each in sequence):
        server = request.getfixturevalue("mariadb_params")  # likewise
        env["MARIADB_HOST"], env["MARIADB_PORT"] = str(server["host"]), str(server["port"])
    run_blocks(sequence, ROOT / block.page, tmp_path, env, hidden=OPTIONAL_MODULES - named_modules(page_text(block)))


def test_the_extras_map_follows_pyproject() -> None:
    """Every optional extra of pyproject.toml but [test] and [docs] is in EXTRA_MODULES, and no other."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    table = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"(?m)^([a-z][a-z-]*) = \[", table))
    assert extras - {"test", "docs"} == EXTRA_MODULES.keys()


def test_a_page_that_does_not_name_an_extra_cannot_import_it(tmp_path: Path) -> None:
    """The hiding hook refuses what the page does not name, in the blocks and in the commands they start."""
    fake = tmp_path / "page.md"
    fake.write_text("## S\n\n```python\nimport duckdb\n```\n")
    blocks = readme_blocks(fake.read_text(), "docs/page.md")
    assert named_modules(fake.read_text()) == frozenset()
    with pytest.raises(pytest.fail.Exception, match="not named on this page"):
        run_blocks(blocks, fake, tmp_path, hidden=OPTIONAL_MODULES)
    assert named_modules("pip install 'guarded-sqlite[duckdb]'") == {"duckdb"}
    assert named_modules("pip install pandas SQLAlchemy") == {"pandas", "sqlalchemy"}
    shell = readme_blocks("```sh\npython -c 'import litellm'\n```\n", "docs/page.md")
    with pytest.raises(pytest.fail.Exception, match="exit status 1"):
        run_blocks(shell, fake, tmp_path, hidden=frozenset({"litellm"}))


def test_a_print_that_breaks_its_comment_s_promise_fails(tmp_path: Path) -> None:
    fake = tmp_path / "README.md"
    fake.write_text(
        "## S\n\n```python\nprint(1, 1)  # 1 1\nprint('SELECT x FROM t')  # SELECT x ...\n"
        "print(24)  # 24: the copies\nprint(None, None)  # 1 1\n```\n"
    )
    with pytest.raises(pytest.fail.Exception) as failed:
        run_blocks(readme_blocks(fake.read_text()), fake, tmp_path)
    assert "line 7 promises '1 1' (# 1 1) and printed 'None None\\n'" in str(failed.value)


def test_readme_has_the_blocks_this_file_expects() -> None:
    """The parser sees the README's and the pages' blocks: runnable ones in the sections that have them."""
    sections = {block.section for block in RUNNABLE}
    assert {
        "Two commands",
        "Quick start",
        "docs/guide/rescue.md",
        "docs/guide/engines.md",
        "docs/agents.md",
    } <= sections
    assert [block.lang for block in BLOCKS if block.section == "Two commands"] == ["sh", "sh"]
    assert any(needs_postgres(block) for block in RUNNABLE)


def test_a_raising_block_fails_naming_its_readme_line(tmp_path: Path) -> None:
    fake = tmp_path / "README.md"
    fake.write_text("# t\n\n## S\n\n```python\nx = 1\n```\n\n```python\nassert x == 2, 'x is 1'\n```\n")
    blocks = readme_blocks(fake.read_text())
    assert [(b.lang, b.line, b.section) for b in blocks] == [("python", 6, "S"), ("python", 10, "S")]
    run_blocks(blocks[:1], fake, tmp_path)  # the first alone runs
    with pytest.raises(pytest.fail.Exception) as failed:
        run_blocks(blocks, fake, tmp_path)
    message = str(failed.value)
    assert "README.md:10-python" in message
    assert (
        f'File "{fake}", line 10' in message and "x is 1" in message and "README.md:10 (python block) raised" in message
    )


def test_a_failing_sh_block_fails_naming_its_readme_line(tmp_path: Path) -> None:
    fake = tmp_path / "README.md"
    fake.write_text("## S\n\n```sh\ntrue\nfalse\necho not reached\n```\n")
    with pytest.raises(pytest.fail.Exception) as failed:
        run_blocks(readme_blocks(fake.read_text()), fake, tmp_path)
    assert "README.md:4 (sh block) failed: exit status 1" in str(failed.value)
    assert "not reached" not in str(failed.value)


def test_ci_runs_readme_two_commands() -> None:
    """.ci/run runs the "Two commands" blocks as .ci/readme_commands.py reads them, and it reads them right."""
    expected = [block.code.strip() for block in BLOCKS if block.section == "Two commands"]
    read = [
        subprocess.run(
            [sys.executable, str(ROOT / ".ci" / "readme_commands.py"), which],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for which in ("demo", "test")
    ]
    assert read == expected
    assert "pip install -q -e . &&" in read[0] and "[test]" not in read[0]  # the demo installs no test extras
    assert "'.[test]'" in read[1] and "pytest" in read[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for line in (
        "demo_command=$(python3 .ci/readme_commands.py demo)",
        "test_command=$(python3 .ci/readme_commands.py test)",
        'bash -c "$demo_command" > /dev/null',
        'bash -c "$test_command"',
    ):
        assert line in ci, line


# The demo (and the CLI in front of it) must run with the runtime dependencies alone: an import of any
# module that is neither the standard library's nor a runtime dependency's fails as in a venv without it.
NO_EXTRAS = r"""
import importlib.abc, sys
allowed = set(sys.stdlib_module_names) | {"guarded_sqlite", "sqlglot", "wrapt"} | set(sys.modules)
class NoExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in allowed:
            raise ModuleNotFoundError(f"No module named {name!r} (not a runtime dependency)", name=name)
        return None
sys.meta_path.insert(0, NoExtras())
from guarded_sqlite.cli.commands import main
sys.exit(main(["demo", "--db", "shop.db"]))
"""


def test_demo_needs_only_the_runtime_dependencies(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", NO_EXTRAS], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "guarded_sqlite: 6 rows" in done.stdout
    assert (tmp_path / "shop.db").is_file()
