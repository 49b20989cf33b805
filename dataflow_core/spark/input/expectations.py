"""The input rules, read once from an expectation-suite file in `expectations/`.

They live in the input layer, which tags rows with them (`rows.tag_rows`); the quality
gates build on them. Spark is imported only to turn a rule into a predicate, so a suite's
columns can be read before any Spark starts (a pipeline's pre-flight check).

The file is a Great Expectations suite (GE's own JSON layout). Both the GE validation
(`dataflow_core.quality.validate`) and the row-level split (`dataflow_core.quality.split`)
are built from the `Rule` objects here, so they cannot drift apart. Only expectation types
with an exact row-level meaning are accepted; anything else is refused by name.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from dataflow_core.errors import DataflowError
from dataflow_core.paths import package_data

if TYPE_CHECKING:
    from pyspark.sql import Column

EXPECTATIONS_DIR_ENV = "DATAFLOW_EXPECTATIONS_DIR"
DEFAULT_SUITE = "video_events"


def expectations_dirs() -> list[Path]:
    """Where a suite named without a path is looked for, first match wins:
    `$DATAFLOW_EXPECTATIONS_DIR` (the user's suites, which may also replace a shipped one),
    then the suites shipped in the package (`dataflow_core/expectations/`: the gates' own and
    the sample's `video_events`)."""
    configured = os.environ.get(EXPECTATIONS_DIR_ENV)
    return ([Path(configured)] if configured else []) + [package_data("expectations")]


def _suite_path(suite: str, directory: Path | str | None) -> Path:
    if str(suite).endswith(".json"):
        return Path(suite)
    candidates = [Path(directory)] if directory else expectations_dirs()
    for folder in candidates:
        if (folder / f"{suite}.json").is_file():
            return folder / f"{suite}.json"
    return candidates[0] / f"{suite}.json"  # the error names where the user's suite belongs


# --- row predicates per expectation type (true = the row passes) --------------------
# They follow GE's semantics: column-map expectations other than not-null ignore nulls,
# and the pair rule ignores a row as `ignore_row_if` says.


def _not_null(kw: dict[str, Any]) -> "Column":
    from pyspark.sql import functions as F

    return F.col(kw["column"]).isNotNull()


def _in_set(kw: dict[str, Any]) -> "Column":
    from pyspark.sql import functions as F

    column = F.col(kw["column"])
    return column.isNull() | column.isin(list(kw["value_set"]))


def _between(kw: dict[str, Any]) -> "Column":
    from pyspark.sql import functions as F

    column = F.col(kw["column"])
    ok = F.lit(True)
    if kw.get("min_value") is not None:
        low = F.lit(kw["min_value"])
        ok = ok & (column > low if kw.get("strict_min") else column >= low)
    if kw.get("max_value") is not None:
        high = F.lit(kw["max_value"])
        ok = ok & (column < high if kw.get("strict_max") else column <= high)
    return column.isNull() | ok


def _a_greater_than_b(kw: dict[str, Any]) -> "Column":
    from pyspark.sql import functions as F

    a, b = F.col(kw["column_A"]), F.col(kw["column_B"])
    compare = a >= b if kw.get("or_equal") else a > b
    ignore = kw.get("ignore_row_if", "both_values_are_missing")
    if ignore == "either_value_is_missing":
        skipped = a.isNull() | b.isNull()
    elif ignore == "both_values_are_missing":
        skipped = a.isNull() & b.isNull()
    else:
        skipped = F.lit(False)
    return skipped | compare


_PREDICATES: dict[str, Callable[[dict[str, Any]], Column]] = {
    "expect_column_values_to_not_be_null": _not_null,
    "expect_column_values_to_be_in_set": _in_set,
    "expect_column_values_to_be_between": _between,
    "expect_column_pair_values_a_to_be_greater_than_b": _a_greater_than_b,
}
# Expectations about the table as a whole (no row breaks them on its own). Only gate suites
# (meta.kind "gate") may use them: they fail the gate but quarantine no row.
_TABLE_LEVEL: dict[str, tuple[str, ...]] = {
    "expect_column_to_exist": ("column",),
    "expect_column_values_to_be_of_type": ("column", "type_"),
    "expect_column_proportion_of_unique_values_to_be_between": ("column",),
    "expect_table_row_count_to_be_between": (),
}
_REQUIRED_KWARGS: dict[str, tuple[str, ...]] = {
    "expect_column_values_to_not_be_null": ("column",),
    "expect_column_values_to_be_in_set": ("column", "value_set"),
    "expect_column_values_to_be_between": ("column",),
    "expect_column_pair_values_a_to_be_greater_than_b": ("column_A", "column_B"),
}


@dataclass(frozen=True)
class Rule:
    """One expectation: its reason tag, GE type and kwargs, and why it exists."""

    name: str
    expectation_type: str
    kwargs: dict[str, Any]
    description: str = ""

    @property
    def row_level(self) -> bool:
        """Whether single rows can break it (and are quarantined for it)."""
        return self.expectation_type in _PREDICATES

    @property
    def mostly(self) -> float:
        """The share of rows that must pass for the expectation to succeed (gate suites)."""
        return float(self.kwargs.get("mostly", 1.0))

    def passes(self) -> "Column":
        """Spark predicate, true when a row satisfies the rule (never null)."""
        from pyspark.sql import functions as F

        return F.coalesce(_PREDICATES[self.expectation_type](self.kwargs), F.lit(False))

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self.kwargs[k] for k in ("column", "column_A", "column_B") if k in self.kwargs)


@dataclass(frozen=True)
class RuleSet:
    """A named, ordered list of rules (one suite file)."""

    name: str
    rules: tuple[Rule, ...]
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def rule(self, name: str) -> Rule:
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(rule.name for rule in self.rules)

    @property
    def row_rules(self) -> tuple[Rule, ...]:
        """The rules single rows can break (the ones the quarantine split applies)."""
        return tuple(rule for rule in self.rules if rule.row_level)

    def plus(self, rules: "RuleSet | list[Rule] | tuple[Rule, ...]", name: str | None = None) -> "RuleSet":
        """This suite followed by more rules (names must stay unique)."""
        extra = tuple(rules.rules if isinstance(rules, RuleSet) else rules)
        clash = sorted(set(self.names) & {r.name for r in extra})
        if clash:
            raise DataflowError(f"suite {self.name!r}: rule name(s) {', '.join(clash)} used twice")
        return RuleSet(name or self.name, self.rules + extra, self.source, dict(self.meta))

    def check_columns(self, columns: list[str]) -> None:
        """Refuse data that lacks a column some rule checks (it would fail obscurely later).
        `expect_column_to_exist` is exempt: a missing column is what it reports."""
        checked = {c for rule in self.rules if rule.expectation_type != "expect_column_to_exist"
                   for c in rule.columns}
        missing = sorted(checked - set(columns))
        if missing:
            raise DataflowError(
                f"suite {self.name!r} checks column(s) {', '.join(missing)} that the data lacks "
                f"(it has {', '.join(columns)})"
            )


def load_rules(
    suite: str = DEFAULT_SUITE,
    directory: Path | str | None = None,
    params: dict[str, Any] | None = None,
) -> RuleSet:
    """Read `<directory>/<suite>.json` (or a path to a .json file) into checked rules.

    A kwarg value `"${name}"` is replaced by `params[name]` (gate suites use it for
    pipeline settings such as the allowed skew)."""
    path = _suite_path(suite, directory)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataflowError(f"expectation suite file {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise DataflowError(f"expectation suite file {path}: invalid JSON at line {exc.lineno}: "
                            f"{exc.msg}") from None
    if params is not None or _has_placeholder(document):
        document = _substitute(document, params or {}, str(path))
    return rules_from_document(document, source=str(path))


_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _has_placeholder(value: Any) -> bool:
    if isinstance(value, str):
        return bool(_PLACEHOLDER.fullmatch(value))
    if isinstance(value, dict):
        return any(_has_placeholder(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_placeholder(v) for v in value)
    return False


def _substitute(value: Any, params: dict[str, Any], source: str) -> Any:
    if isinstance(value, str):
        match = _PLACEHOLDER.fullmatch(value)
        if not match:
            return value
        if match.group(1) not in params:
            raise DataflowError(f"expectation suite {source}: no value for placeholder {value}")
        return params[match.group(1)]
    if isinstance(value, dict):
        return {k: _substitute(v, params, source) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, params, source) for v in value]
    return value


def rules_from_document(document: dict[str, Any], source: str = "<suite>") -> RuleSet:
    """Check a GE suite document and turn each expectation into a `Rule`."""
    if not isinstance(document, dict) or not isinstance(document.get("expectations"), list):
        raise DataflowError(f"expectation suite {source}: needs a list under 'expectations'")
    name = document.get("name") or Path(source).stem
    gate = (document.get("meta") or {}).get("kind") == "gate"
    rules: list[Rule] = []
    for index, item in enumerate(document["expectations"], start=1):
        where = f"expectation suite {source}, expectation #{index}"
        if not isinstance(item, dict):
            raise DataflowError(f"{where}: must be an object")
        etype = item.get("type")
        kwargs = item.get("kwargs") or {}
        rule_name = (item.get("meta") or {}).get("rule")
        if etype not in _PREDICATES and not (gate and etype in _TABLE_LEVEL):
            allowed = sorted(_PREDICATES) + (sorted(_TABLE_LEVEL) if gate else [])
            raise DataflowError(
                f"{where}: type {etype!r} has no row-level form; use one of " + ", ".join(allowed)
            )
        required = _REQUIRED_KWARGS.get(etype) or _TABLE_LEVEL[etype]
        missing = [k for k in required if k not in kwargs]
        if missing:
            raise DataflowError(f"{where} ({etype}): kwargs lack {', '.join(missing)}")
        mostly = kwargs.get("mostly", 1.0)
        if mostly != 1.0 and not gate:
            raise DataflowError(f"{where} ({etype}): 'mostly' is not supported; a row either "
                                "passes or is quarantined (only gate suites, meta.kind \"gate\", "
                                "may tolerate a share of bad rows)")
        if not isinstance(mostly, (int, float)) or not 0 < mostly <= 1:
            raise DataflowError(f"{where} ({etype}): 'mostly' must be a share in (0, 1], got {mostly!r}")
        if not isinstance(rule_name, str) or not rule_name.strip():
            raise DataflowError(f"{where} ({etype}): meta.rule (the quarantine reason tag) is "
                                "missing")
        if any(r.name == rule_name for r in rules):
            raise DataflowError(f"{where}: rule name {rule_name!r} is used twice")
        rules.append(Rule(rule_name, etype, dict(kwargs), item.get("description") or ""))
    return RuleSet(name=name, rules=tuple(rules), source=source, meta=document.get("meta") or {})
