"""Where the agent tools' reading of a statement could differ from the server's: a scan for names that
needs no lexer (``named_anywhere``), and for MySQL/MariaDB a second reading of the text, by the
server's own rules for literals and comments, that sqlglot's tokens must match
(``mysql_reading_problem``).

The agent tools read a model's statement with sqlglot (is it a query, one statement, what to redact in
the audit log); the server reads it with its own lexer. Where the two split the text differently, text
sqlglot takes for a comment or a literal is code to the server, and a call the check refuses runs (the
issue's repros a22-a28). Two answers to that, both here:

- A name the tools refuse (``GET_LOCK``, ``pg_advisory_lock``) can only be called by writing it: it is
  looked for in the whole text, literals and comments included, case-insensitively. No lexer is
  involved, so none can disagree; a literal that merely mentions such a name is refused too.
- On MySQL/MariaDB every other question is still sqlglot's, so a text is served only when sqlglot's
  tokens put literals and comments exactly where the server's rules do (under the ``sql_mode`` the
  tools pin: no ``ANSI_QUOTES``, no ``NO_BACKSLASH_ESCAPES``), and when it holds no character two lexers
  are known to class differently (non-ASCII white space, control characters). The rules below are
  MariaDB's ``sql_lex.cc`` ones for where a literal or comment starts and ends, nothing more.
"""

from __future__ import annotations

import re
from functools import lru_cache

from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType  # type: ignore[attr-defined]  # sqlglot re-exports them

from .trees import dialect_named

__all__ = ["STRING_TOKENS", "mysql_reading_problem", "named_anywhere", "unsafe_character"]


def named_anywhere(sql: str, names: frozenset[str]) -> str | None:
    """The first of ``names`` (lower-case) that ``sql`` holds anywhere, case-insensitively, or None.
    Not a reading of the statement: a name inside a literal or a comment counts too, so no lexer can
    hide one from it.

    >>> named_anywhere("SELECT 1 --\\u00a0+ GET_LOCK('a', 0)", frozenset({"get_lock"}))
    'get_lock'
    >>> named_anywhere("SELECT 'nothing here'", frozenset({"get_lock"}))
    """
    lowered = sql.lower()
    found = [(lowered.find(name), name) for name in names if name in lowered]
    return min(found)[1] if found else None


_ASCII_SPACE = frozenset(" \t\n\r")


def unsafe_character(sql: str) -> str | None:
    """The first character of ``sql`` that lexers are known to class differently, as ``U+XXXX``, or
    None: control characters other than tab, line feed and carriage return (a NUL ends some readings of
    a text), and white space that is not ASCII (U+00A0, U+2028, ... are white space to Python and
    sqlglot, and letters of a name to MariaDB and PostgreSQL). Looked for in literals too: a literal
    that needs one can be written with ``CHAR()``/``chr()`` or passed as a parameter.

    >>> unsafe_character("SELECT 1 AS x\\u00a0y")
    'U+00A0'
    >>> unsafe_character("SELECT 'café'\\r\\n")
    """
    for character in sql:
        if character in _ASCII_SPACE:
            continue
        code = ord(character)
        if code < 0x20 or 0x7F <= code < 0xA0 or (code > 0x7F and character.isspace()):
            return f"U+{code:04X}"
    return None


def mysql_reading_problem(sql: str) -> str | None:
    """Why MySQL/MariaDB and sqlglot could read ``sql`` differently, or None when sqlglot's tokens put
    every literal and comment where the server's lexer does (its ``sql_mode`` without ``ANSI_QUOTES``
    and ``NO_BACKSLASH_ESCAPES``, as the agent tools pin it).

    >>> mysql_reading_problem("SELECT 'a\\\\'' AS `x``y` -- fine\\nFROM t # also fine")
    >>> mysql_reading_problem("SELECT 1 --x")  # minus minus x to both
    >>> mysql_reading_problem("SELECT 1 /* /* */ , 2 */")  # not nested, to both
    >>> mysql_reading_problem("SELECT 1 --\\x01 + 2")  # a comment to the server, minus minus to sqlglot
    'it holds the character U+0001, which sqlglot and the server class differently'
    """
    character = unsafe_character(sql)
    if character is not None:
        return f"it holds the character {character}, which sqlglot and the server class differently"
    if len(sql) > _CACHED_CHARS:
        return _mysql_reading_problem.__wrapped__(sql)
    return _mysql_reading_problem(sql)


_CACHED_CHARS = 20_000


@lru_cache(maxsize=256)
def _mysql_reading_problem(sql: str) -> str | None:
    server = _mysql_classes(sql)
    if isinstance(server, str):
        return server
    try:
        tokens = dialect_named("mysql").tokenize(sql)
    except SqlglotError:
        return "sqlglot cannot read it (an unterminated string or comment?)"
    theirs = _token_classes(sql, tokens)
    if server == theirs:
        return None
    position = next(i for i, (mine, its) in enumerate(zip(server, theirs)) if mine != its)
    return f"sqlglot and the server would read it differently at character {position}"


_SPACE, _COMMENT, _CODE, _LITERAL = 0, 1, 2, 3
"""What one character of a text is to a reader: white space (outside a literal: in code or in a
comment alike), part of a comment, code (a keyword, name, number, operator, or a literal's prefix such
as ``N`` or ``X``), or part of a literal or quoted name. Both readings class every character so, and
must give the same class to each."""

_AS_SPACE = bytes([_SPACE, _SPACE, _SPACE, _LITERAL]) + bytes(252)
"""``bytes.translate``'s table that makes a white-space character ``_SPACE`` unless it is in a literal."""

_WHITE_RUNS = re.compile(r"[ \t\n\r\x0b\x0c]+")


def _with_spaces(sql: str, classes: bytearray) -> bytearray:
    """``classes`` with every white-space character outside a literal made ``_SPACE``: sqlglot's tokens
    do not tell white space in a comment from white space between tokens, nor mind it inside one token
    (its multi-word keywords, ``ORDER BY``)."""
    for run in _WHITE_RUNS.finditer(sql):
        start, stop = run.span()
        classes[start:stop] = classes[start:stop].translate(_AS_SPACE)
    return classes


_MYSQL_SPECIAL = re.compile(r"[#'\"`/-]")
"""The characters that can open a comment or a literal to MariaDB; white space is MariaDB's
``my_isspace`` for single bytes (``_WHITE_RUNS``; ``unsafe_character`` refuses \\v and \\f)."""


def _mysql_classes(sql: str) -> bytearray | str:
    """Each character's class as MariaDB's lexer reads ``sql``, or why it is refused outright
    (executable comments, an unterminated literal or comment, a quoted user variable name)."""
    classes = bytearray([_CODE]) * len(sql)  # a byte a character: a long text's copy stays small
    position, end = 0, len(sql)
    while position < end:
        special = _MYSQL_SPECIAL.search(sql, position)  # what can open a comment or a literal
        if special is None:
            break
        position = special.start()
        character = sql[position]
        following = sql[position + 1 : position + 3]
        if character == "#" or (
            character == "-" and following[:1] == "-" and (len(following) < 2 or ord(following[1]) <= 0x20)
        ):
            # To the end of the line; the line feed itself is white space. '--' is a comment only before
            # a space or a control character (or the end): '1--1' is 1 - -1.
            stop = sql.find("\n", position)
            stop = end if stop < 0 else stop
        elif character == "/" and following[:1] == "*":
            if following[1:2] in ("!", "+") or sql.startswith("M!", position + 2):
                return "it holds an executable comment or an optimizer hint"
            close = sql.find("*/", position + 2)
            if close < 0:
                return "it holds an unterminated comment"
            stop = close + 2  # not nested: the first */ ends it
        elif character in "'\"`":
            if position > 0 and sql[position - 1] == "@":
                # @'name' is read without backslash escapes: refused rather than modelled.
                return "it holds a quoted user variable name (@'...')"
            stop = _literal_end(sql, position, escapes=character != "`" and not _is_hex_or_bit(sql, position))
            if stop < 0:
                return "it holds an unterminated string or quoted name"
            classes[position:stop] = bytes([_LITERAL]) * (stop - position)
            position = stop
            continue
        else:
            position += 1
            continue
        classes[position:stop] = bytes([_COMMENT]) * (stop - position)
        position = stop
    return _with_spaces(sql, classes)


def _is_hex_or_bit(sql: str, quote: int) -> bool:
    """Whether the quote at ``quote`` opens ``X'..'`` or ``B'..'``, read without escapes."""
    if quote == 0 or sql[quote - 1] not in "xXbB":
        return False
    return quote == 1 or not (sql[quote - 2].isalnum() or sql[quote - 2] in "_$")


def _literal_end(sql: str, start: int, *, escapes: bool) -> int:
    """The index just past the literal whose opening quote is at ``start`` (a doubled quote is one
    quote; with ``escapes`` a backslash takes the next character), or -1 when it does not end."""
    quote = sql[start]
    stops = (_ESCAPED_STOPS if escapes else _PLAIN_STOPS)[quote]
    position = start + 1
    while True:
        found = stops.search(sql, position)
        if found is None:
            return -1
        at = found.start()
        if sql[at] == "\\" or sql.startswith(quote, at + 1):
            position = at + 2  # an escaped character, or a doubled quote
        else:
            return at + 1


_PLAIN_STOPS = {quote: re.compile(re.escape(quote)) for quote in "'\"`"}
_ESCAPED_STOPS = {quote: re.compile("[" + re.escape(quote) + r"\\]") for quote in "'\"`"}


STRING_TOKENS = frozenset(
    {
        TokenType.STRING,
        TokenType.NATIONAL_STRING,
        TokenType.RAW_STRING,
        TokenType.HEREDOC_STRING,
        TokenType.BIT_STRING,
        TokenType.BYTE_STRING,
        TokenType.HEX_STRING,
    }
)
"""sqlglot's tokens of string literals, in every form (national, raw, heredoc, bit, byte, hex)."""

_QUOTED_TOKENS = STRING_TOKENS | {TokenType.IDENTIFIER}


def _token_classes(sql: str, tokens: list[Token]) -> bytearray:
    """Each character's class as sqlglot's tokens read ``sql``: outside every token ``_COMMENT`` (white
    space made ``_SPACE`` afterwards), inside a quoted token from its first quote on a literal, elsewhere code. A
    string token without a quote is sqlglot's reading of a command's rest as one string (``SELECT begin
    execute ...``), which the server reads as code: all of it a literal here, so it never agrees; hex
    and bit numbers (``0x41``, ``0b101``) are code to both."""
    classes = bytearray([_COMMENT]) * len(sql)
    for token in tokens:
        start, stop = token.start, token.end + 1
        kind = _CODE
        if token.token_type in _QUOTED_TOKENS:
            quote = next((i for i in range(start, stop) if sql[i] in "'\"`"), None)
            if quote is None:
                quote = stop if token.token_type in _NUMBER_LIKE else start
            classes[start:quote] = bytes([_CODE]) * (quote - start)
            start, kind = quote, _LITERAL
        classes[start:stop] = bytes([kind]) * (stop - start)
    return _with_spaces(sql, classes)


_NUMBER_LIKE = frozenset({TokenType.HEX_STRING, TokenType.BIT_STRING})
