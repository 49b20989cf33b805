"""Window and trigger expressions as text, e.g. `AfterWatermark(early=AfterCount(1))`.

Scenarios, job parameters and Airflow forms all spell strategies this way; both the Beam
names and the paper's names are accepted (FORMAT.md's trigger table).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from dataflow_core.model import triggers as t
from dataflow_core.model import windows as w
from dataflow_core.model.time import parse_duration
from dataflow_core.model.trigger_machine import Trigger

_TOKEN = re.compile(r"\s*(?:(?P<dur>\d+(?:ms|s|m|h|d)\b)|(?P<num>\d+(?:\.\d+)?|\.\d+)|(?P<name>[A-Za-z_]\w*)|(?P<sym>[(),=]))")


class ExpressionError(ValueError):
    """An expression that does not parse or names an unknown window or trigger."""


@dataclass(frozen=True)
class _Call:
    name: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class _Duration:
    ms: int


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"unexpected {text[pos:].strip()[:20]!r} at column {pos + 1} in {text!r}")
        kind = m.lastgroup
        assert kind is not None  # every alternative of _TOKEN is a named group
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, kind: str, value: str | None = None) -> str:
        tok = self.peek()
        if tok is None or tok[0] != kind or (value is not None and tok[1] != value):
            found = "the end" if tok is None else repr(tok[1])
            raise ExpressionError(f"expected {value or kind} but found {found} in {self.text!r}")
        self.i += 1
        return tok[1]

    def parse(self) -> Any:
        value = self.value()
        if self.peek() is not None:
            raise ExpressionError(f"unexpected {self.tokens[self.i][1]!r} after the expression in {self.text!r}")
        return value

    def value(self) -> Any:
        tok = self.peek()
        if tok is None:
            raise ExpressionError(f"expression ends too early: {self.text!r}")
        kind, text = tok
        if kind == "dur":
            self.i += 1
            return _Duration(parse_duration(text))
        if kind == "num":
            self.i += 1
            return float(text) if "." in text else int(text)
        name = self.take("name")
        if self.peek() != ("sym", "("):
            return _Call(name, (), ())  # bare name, e.g. `Default`
        self.take("sym", "(")
        args: list[Any] = []
        kwargs: list[tuple[str, Any]] = []
        while self.peek() != ("sym", ")"):
            if (tok := self.peek()) and tok[0] == "name" and self.tokens[self.i + 1 : self.i + 2] == [("sym", "=")]:
                key = self.take("name")
                self.take("sym", "=")
                kwargs.append((key, self.value()))
            else:
                if kwargs:
                    raise ExpressionError(f"positional argument after keyword in {self.text!r}")
                args.append(self.value())
            if self.peek() == ("sym", ","):
                self.take("sym", ",")
            elif self.peek() != ("sym", ")"):
                raise ExpressionError(f"expected ',' or ')' in {self.text!r}")
        self.take("sym", ")")
        return _Call(name, tuple(args), tuple(kwargs))


def _duration(call: str, what: str, v: Any) -> int:
    if isinstance(v, _Duration):
        return v.ms
    raise ExpressionError(f"{call}: {what} must be a duration such as 30s or 2m, got {_show(v)}")


def _trigger(call: str, v: Any) -> Trigger:
    if isinstance(v, Trigger):
        return v
    raise ExpressionError(f"{call}: expected a trigger, got {_show(v)}")


def _show(v: Any) -> str:
    if isinstance(v, _Duration):
        return f"{v.ms}ms"
    if isinstance(v, _Call):
        return v.name + "(...)"
    return repr(v)


def _count(call: str, v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise ExpressionError(f"{call}: expected a whole number, got {_show(v)}")


def _fraction(call: str, v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1:
        return float(v)
    raise ExpressionError(f"{call}: expected a fraction in (0, 1] such as 0.99, got {_show(v)}")


# name -> (positional parameter names, keyword parameter names, builder)
_Spec = tuple[tuple[str, ...], tuple[str, ...], Callable[..., Any]]

WINDOWS: dict[str, _Spec] = {
    "GlobalWindows": ((), (), lambda c: w.GlobalWindows()),
    "FixedWindows": (
        ("size",),
        ("offset",),
        lambda c, size, offset=_Duration(0): w.FixedWindows(_duration(c, "size", size), _duration(c, "offset", offset)),
    ),
    "SlidingWindows": (
        ("size", "period"),
        ("offset",),
        lambda c, size, period, offset=_Duration(0): w.SlidingWindows(
            _duration(c, "size", size), _duration(c, "period", period), _duration(c, "offset", offset)
        ),
    ),
    "Sessions": (("gap",), (), lambda c, gap: w.Sessions(_duration(c, "gap", gap))),
}

_after_watermark: _Spec = (
    (),
    ("early", "late"),
    lambda c, early=None, late=None: t.AfterWatermark(
        early=None if early is None else _trigger(c, early), late=None if late is None else _trigger(c, late)
    ),
)
_aligned: _Spec = (
    ("period",),
    ("offset",),
    lambda c, period, offset=_Duration(0): t.AlignedProcessingTime(
        _duration(c, "period", period), _duration(c, "offset", offset)
    ),
)
_count_spec: _Spec = (("count",), (), lambda c, count: t.AfterCount(_count(c, count)))
_repeat: _Spec = (("trigger",), (), lambda c, trig: t.Repeatedly(_trigger(c, trig)))
_percentile: _Spec = (("percentile",), (), lambda c, p: t.AfterPercentileWatermark(_fraction(c, p)))

TRIGGERS: dict[str, _Spec] = {
    "Default": ((), (), lambda c: t.Default()),
    "AfterWatermark": _after_watermark,
    "AtWatermark": _after_watermark,
    "AfterProcessingTime": (("delay",), (), lambda c, d: t.AfterProcessingTime(_duration(c, "delay", d))),
    "AlignedProcessingTime": _aligned,
    "AtPeriod": _aligned,
    "AfterCount": _count_spec,
    "AtCount": _count_spec,
    "AfterPane": _count_spec,
    "Repeatedly": _repeat,
    "Repeat": _repeat,
    "OrFinally": (("trigger", "until"), (), lambda c, a, b: t.OrFinally(_trigger(c, a), _trigger(c, b))),
    "RepeatUntil": (("trigger", "until"), (), lambda c, a, b: t.RepeatUntil(_trigger(c, a), _trigger(c, b))),
    "Never": ((), (), lambda c: t.Never()),
    "AfterPercentileWatermark": _percentile,
    "AtPercentileWatermark": _percentile,
}
_VARIADIC: dict[str, Callable[..., Trigger]] = {
    "AfterEach": t.AfterEach,
    "SequenceOf": t.AfterEach,
    "AfterFirst": t.AfterFirst,
    "FirstOf": t.AfterFirst,
    "AfterAll": t.AfterAll,
    "AllOf": t.AfterAll,
}


# FORMAT.md's table writes `AfterCount(n)` and `AfterProcessingTime(d)`: accept those names.
_ALIASES = {"n": "count", "d": "delay"}


def _build(node: Any, table: dict[str, _Spec], kind: str, variadic: dict[str, Callable[..., Any]]) -> Any:
    if not isinstance(node, _Call):
        return node
    if node.name in variadic:
        if node.kwargs:
            raise ExpressionError(f"{node.name} takes only triggers, no keyword arguments")
        if not node.args:
            raise ExpressionError(f"{node.name} needs at least one trigger")
        return variadic[node.name](*(_trigger(node.name, _build(a, table, kind, variadic)) for a in node.args))
    if node.name not in table:
        known = ", ".join(sorted(set(table) | set(variadic)))
        raise ExpressionError(f"unknown {kind} {node.name!r} (known: {known})")
    positional, keywords, builder = table[node.name]
    args = [_build(a, table, kind, variadic) for a in node.args]
    kwargs = {_ALIASES.get(k, k) if _ALIASES.get(k) in positional else k: _build(v, table, kind, variadic)
              for k, v in node.kwargs}
    allowed = set(positional) | set(keywords)
    for k in kwargs:
        if k not in allowed:
            raise ExpressionError(f"{node.name} has no parameter {k!r} (parameters: {', '.join(positional + keywords) or 'none'})")
    for name, value in zip(positional, args):
        if name in kwargs:
            raise ExpressionError(f"{node.name}: {name} given twice")
        kwargs[name] = value
    if len(args) > len(positional):
        raise ExpressionError(f"{node.name} takes {len(positional)} positional argument(s), got {len(args)}")
    missing = [p for p in positional if p not in kwargs]
    if missing:
        raise ExpressionError(f"{node.name} is missing {', '.join(missing)}")
    ordered = [kwargs.pop(p) for p in positional]
    try:
        return builder(node.name, *ordered, **kwargs)
    except ExpressionError:
        raise
    except ValueError as exc:
        raise ExpressionError(f"{node.name}: {exc}") from None


def parse_window_fn(text: str) -> w.WindowFn:
    return _build(_Parser(str(text)).parse(), WINDOWS, "window", {})


def parse_trigger(text: str) -> Trigger:
    return _build(_Parser(str(text)).parse(), TRIGGERS, "trigger", _VARIADIC)
