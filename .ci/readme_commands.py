"""Print one of the two commands in README.md's "Two commands" section, as written there.

    python3 .ci/readme_commands.py demo   # the first: a fresh venv with the runtime dependencies, and the demo
    python3 .ci/readme_commands.py test   # the second: the test extras, and the tests

`.ci/run` runs what this prints, so CI runs exactly what README tells a reader to run. Standard library
only: it runs before anything is installed. Exits with status 2 and a message if the section does not
hold exactly two ```sh blocks of one line each.
"""

from __future__ import annotations

import sys
from pathlib import Path

SECTION = "## Two commands"
WHICH = ("demo", "test")


def two_commands(readme: str) -> tuple[str, str]:
    """The section's two ```sh blocks, in order, each a single line."""
    lines = readme.splitlines()
    try:
        start = lines.index(SECTION) + 1
    except ValueError:
        raise ValueError(f"README.md has no line {SECTION!r}") from None
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in lines[start:]:
        if current is None:
            if line.startswith("## "):
                break
            if line.startswith("```"):
                current = []
                if line.strip() == "```sh":
                    blocks.append(current)
        elif line.strip() == "```":
            current = None
        else:
            current.append(line)
    commands = [block[0].strip() for block in blocks if len(block) == 1 and block[0].strip()]
    if len(blocks) != 2 or len(commands) != 2:
        raise ValueError(f"{SECTION!r} must hold exactly two ```sh blocks of one line each, found {blocks!r}")
    return commands[0], commands[1]


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or argv[0] not in WHICH:
        print(f"usage: readme_commands.py {{{'|'.join(WHICH)}}} [README.md]", file=sys.stderr)
        return 2
    path = Path(argv[1]) if len(argv) == 2 else Path(__file__).resolve().parent.parent / "README.md"
    try:
        commands = two_commands(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"readme_commands.py: {error}", file=sys.stderr)
        return 2
    print(commands[WHICH.index(argv[0])])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
