"""Which of a pipeline's Spark SQL expressions the fast reader may evaluate itself.

A pipeline's key, time and id expressions are Spark SQL, and the Spark runners compute its
elements with them. The fast reader's DataFusion runs many of them, but not always to the
same value: `substr(s, 0, 2)` is one character there and two in Spark, `substr(s, -2)` the
whole string, `concat(a, NULL)` is `a` there and NULL in Spark, `n / 2` stays an integer,
`"x"` names a column instead of being a string, `date_format` takes other patterns, a
timestamp or a double turns into other text; `split`, `element_at`, `if` or `regexp_extract`
do not exist there at all. A reader that recomputed a
key with such an expression would show a key's elements that are not the ones its panes
were computed from. So it evaluates an expression only when every part of it is one that
both engines evaluate alike (`differs_from_spark`); otherwise it has only what the runners
wrote (the pane log and results, whose key columns are Spark's own values).

Pure: text only, no engine.
"""

from __future__ import annotations

import re
from typing import Collection

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>'(?:[^'\\]|\\.)*')
  | (?P<number>\d+)
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||<=|>=|<>|!=|[=<>(),])
""", re.VERBOSE)

FUNCTIONS = frozenset({"upper", "lower", "trim", "ltrim", "rtrim", "concat_ws", "coalesce", "md5", "replace",
                       "reverse", "length"})
"""Functions both engines evaluate alike for every argument (`substr`/`substring` too, with a
positive literal start: `_substr_agrees`)."""
KEYWORDS = frozenset({"cast", "as", "case", "when", "then", "else", "end", "and", "or", "not", "is", "null", "true",
                      "false", "in"})
CAST_TYPES = frozenset({"string", "varchar", "bigint", "int", "integer"})
"""Types a CAST to gives the same value in both engines (a failed cast fails in both)."""


def differs_from_spark(expression: str, inexact: Collection[str] = ()) -> str | None:
    """None when DataFusion evaluates this Spark SQL expression as Spark does (column
    references, string and integer literals, comparisons, `||`, CASE, casts to CAST_TYPES,
    FUNCTIONS and `substr` from a positive literal position); else the first part that it
    may evaluate differently or not at all, in words. Arithmetic is left out: its types
    (and so its values) depend on the columns'. `inexact`: the input's columns whose text
    differs between the engines (timestamps, floating point), which agree only referred to
    alone (compared as values, not as text)."""
    tokens = _tokens(expression)
    if isinstance(tokens, str):
        return tokens
    columns = {text.lower() for i, (kind, text) in enumerate(tokens)
               if kind == "word" and text.lower() not in KEYWORDS | CAST_TYPES and _next(tokens, i) != "("}
    textual = sorted(c for c in {c.lower() for c in inexact} & columns if len(tokens) > 1)
    if textual:
        return f"an expression of the column {textual[0]} (a timestamp or floating point: its text differs)"
    after_as = False
    for i, (kind, text) in enumerate(tokens):
        word = text.lower()
        if kind == "string" and "\\" in text:
            return f"the string {text} (Spark reads its backslash escapes)"
        if kind == "string" and i and tokens[i - 1][0] == "string":
            return f"the strings {tokens[i - 1][1]}{text} (Spark joins adjacent strings)"
        if kind == "word" and after_as:
            if word not in CAST_TYPES:
                return f"CAST ... AS {text}"
        elif kind == "word" and word not in KEYWORDS and _next(tokens, i) == "(":
            if word in ("substr", "substring"):
                if not _substr_agrees(tokens, i):
                    return f"{text}(...) with a start or length that is not a number (Spark takes a start of 0 as 1 " \
                           "and counts a negative one from the end)"
            elif word not in FUNCTIONS:
                return f"the function {text}(...)"
        after_as = kind == "word" and word == "as"
    return None


def _tokens(expression: str) -> list[tuple[str, str]] | str:
    """The expression's tokens (kind, text), spaces left out; or what could not be read."""
    out, at = [], 0
    while at < len(expression):
        found = _TOKEN.match(expression, at)
        if found is None:
            return f"{expression[at:at + 10]!r}... (arithmetic, a quoted name or syntax DataFusion may read otherwise)"
        if found.lastgroup != "space":
            out.append((found.lastgroup or "", found.group()))
        at = found.end()
    return out


def _next(tokens: list[tuple[str, str]], i: int) -> str | None:
    return tokens[i + 1][1] if i + 1 < len(tokens) else None


def _substr_agrees(tokens: list[tuple[str, str]], i: int) -> bool:
    """Whether the `substr(` at token `i` has a positive number literal as its start (Spark
    takes 0 as 1 and counts a negative start from the end; DataFusion does neither) and, if
    given, a number literal as its length."""
    depth, j = 0, i + 1
    while j < len(tokens):  # past the first argument
        text = tokens[j][1]
        depth += text == "("
        depth -= text == ")"
        if depth == 1 and text == ",":
            break
        if depth == 0:
            return False
        j += 1
    rest = [text for _, text in tokens[j + 1:j + 5]]
    if not rest or not rest[0].isdigit() or int(rest[0]) < 1:
        return False
    return rest[1:2] == [")"] or (rest[1:2] == [","] and rest[2].isdigit() and rest[3:4] == [")"])
