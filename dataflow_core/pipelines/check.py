"""A pipeline checked against its input table before any Spark job: the table's schema comes
from its Delta log (`table_schema.read_schema`, no JVM), and every mistake is one line
naming the field and the fix, e.g. `value: no column amount_usd in shop_orders (did you
mean amount?)`. What each stage's combiner takes and gives is asked of the combiner
(`CombineFn.accepts`, `CombineFn.output_type`); value types left out are inferred from the
table here (`resolve`). `check_warnings` says what fits but may not do what was meant (a
stage that never fires live)."""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from decimal import Decimal
from typing import Any

from dataflow_core.errors import DataflowError
from dataflow_core.model.combiners import BUILT_IN, CombineFn
from dataflow_core.model.panes import Pane, PaneTiming
from dataflow_core.model.trigger_machine import Trigger
from dataflow_core.model.triggers import AfterAll, AfterEach, AfterFirst, AfterWatermark, Never, OrFinally, Repeatedly
from dataflow_core.model.value_types import ATOMIC, element_of, family, holds, normalized
from dataflow_core.model.windows import GlobalWindows, IntervalWindow
from dataflow_core.pipelines.spec import PipelineSpec, StageSpec
from dataflow_core.pipelines.table_schema import TableSchema, columns_in, read_schema


class PipelineMistakes(DataflowError):
    """A pipeline that does not fit its input table; `lines` has one line per mistake."""

    def __init__(self, pipeline: str, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("\n".join(f"pipeline {pipeline}: {line}" for line in lines))


def check_pipeline(spec: PipelineSpec, schema: TableSchema) -> list[str]:
    """Every mistake of `spec` against `schema`, one line each (none: it fits)."""
    mistakes: list[str] = []
    fields: list[tuple[str, str | None]] = [
        *[(f"key {c}", e) for c, e in spec.key.items()], ("value", spec.value), ("where", spec.where),
        ("event_time", spec.event_time), ("ingest_time", spec.ingest_time), ("event_id", spec.event_id),
    ]
    for what, expression in fields:
        for column in columns_in(expression or ""):
            if column not in schema.columns:
                mistakes.append(f"{what}: no column {column} in {schema.name}{_did_you_mean(column, schema)}")
    if spec.partition_column and spec.partition_column not in schema.columns:
        parts = schema.partition_columns
        fix = (f"{schema.name} is partitioned by {', '.join(parts)}: partition_column={parts[0]!r}" if parts
               else f"{schema.name} is not partitioned: partition_column=None")
        mistakes.append(f"partition_column: no column {spec.partition_column} in {schema.name} ({fix})")
    mistakes += _suite_mistakes(spec, schema)
    for n, stage in enumerate(spec.stages):
        mistakes += _stage_mistakes(spec, n, stage, schema)
    return mistakes


def _did_you_mean(column: str, schema: TableSchema, otherwise: str | None = None) -> str:
    close = difflib.get_close_matches(column, list(schema.columns), n=1, cutoff=0.5)
    if close:
        return f" (did you mean {close[0]}?)"
    return f" (set {otherwise})" if otherwise else f" (its columns: {', '.join(schema.columns)})"


def _suite_mistakes(spec: PipelineSpec, schema: TableSchema) -> list[str]:
    if not spec.quality_suite:
        return []
    from dataflow_core.spark.input.expectations import load_rules

    try:
        suite = load_rules(spec.quality_suite)
    except DataflowError as exc:
        return [f"quality_suite: {exc} (or quality_suite=None)"]
    missing = [c for c in dict.fromkeys(c for r in suite.rules for c in r.columns) if c not in schema.columns]
    if not missing:
        return []
    return [f"quality_suite: suite {spec.quality_suite} checks column(s) {', '.join(missing)}, which "
            f"{schema.name} lacks (write a suite for {schema.name}, or quality_suite=None)"]


def _stage_mistakes(spec: PipelineSpec, n: int, stage: StageSpec, schema: TableSchema) -> list[str]:
    out = []
    wfn = stage.strategy.window_fn
    if wfn.reach is None and not isinstance(wfn, GlobalWindows):
        out.append(f"stage {stage.output}: window {wfn.describe()} declares no reach (define WindowFn.reach: how "
                   "far after an element's time its windows can end; without it no event id is ever forgotten)")
    if n == 0:
        input_type = _value_input_type(spec, schema)
        named = f"value {spec.value}"
        source = f"{named} ({normalized(input_type)})" if input_type else named
    else:
        input_type, source, named = stage.input_type, f"input_type {stage.input_type}", "its input"
    out += _type_mistakes(stage, input_type, source, named)
    if n:
        out += _feed_mistakes(spec.stages[n - 1], stage)
    return out


def _type_mistakes(stage: StageSpec, input_type: str | None, source: str, named: str) -> list[str]:
    """Whether the stage's combiner takes inputs of `input_type` (None: not known, the value
    is an expression) and its `value_type` holds what the combiner gives for them (a sum of
    decimal(10,2) as bigint would drop the cents); a type left out must be one the combiner
    can say. `source` names the input with its type, `named` without."""
    c, given, where = stage.strategy.combiner, stage.value_type, f"stage {stage.output}"
    if input_type is not None and not c.accepts(input_type):
        takers = ", ".join(sorted(name for name, fn in BUILT_IN.items() if fn().accepts(input_type)))
        example = " (e.g. a numeric column or a cast)" if c.accepts("bigint") else ""
        other = f", or a combiner that takes {normalized(input_type)} ({takers})" if takers else ""
        return [f"{where}: {c.name} cannot take {source}: give a value it takes{example}{other}"]
    gives = c.output_type(input_type) if input_type is not None else None
    if given is None:
        if gives is None:
            return [f"{where}: value_type: cannot infer the type of {c.name} over {named}; give "
                    "value_type (e.g. int, float, Decimal, or a Spark type such as 'decimal(28,3)')"]
        return []
    if gives is not None and not holds(given, gives):
        return [f"{where}: value_type {given} cannot hold {c.name} over {source}, which is {gives}: "
                f"value_type={gives!r} (or leave value_type out to infer it)"]
    if input_type is None and not _may_give(c, given):
        return [f"{where}: value_type {given} is no type {c.name} gives: give the type of its output "
                "(e.g. 'double', 'bigint' or 'decimal(28,3)' for a number), or leave it out"]
    return []


def _may_give(combiner: CombineFn, value_type: str) -> bool:
    """Whether `combiner` gives a value of `value_type`'s family over some input it takes
    (asked when the input's type is not known); True when the combiner declares no types."""
    inputs = [*ATOMIC, "decimal(38,18)", value_type, *filter(None, [element_of(value_type)])]
    gives = [t for t in (combiner.output_type(i) for i in inputs if combiner.accepts(i)) if t is not None]
    return not gives or family(value_type) in {family(t) for t in gives}


_CAST = re.compile(r"(?:try_)?cast\s*\((.+)\s+as\s+([a-z_]+(?:\s*\(\s*\d+\s*,\s*\d+\s*\))?)\s*\)", re.IGNORECASE)


def _value_input_type(spec: PipelineSpec, schema: TableSchema) -> str | None:
    """The type of `value` when it is a plain column of the table or a cast to a type
    (`cast(amount AS double)`); None otherwise (only Spark knows an expression's type)."""
    value = spec.value.strip()
    cast = _CAST.fullmatch(value)
    if cast and _balanced(cast.group(1)):  # one cast around it all, not `cast(a AS int) / cast(b AS int)`
        return normalized(cast.group(2))
    return schema.columns.get(value.strip("`"))


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _feed_mistakes(up: StageSpec, stage: StageSpec) -> list[str]:
    """Whether `up`'s panes can feed `stage`: its from_upstream, tried on a pane of `up`'s
    shape, gives (key, value) pairs with as many key parts as `stage.key_columns` (whether
    the combiner takes their values is `_type_mistakes`', over `input_type`)."""
    sample = Pane(tuple("k" for _ in up.key_columns) if len(up.key_columns) > 1 else "k",
                  IntervalWindow(0, 60_000), _sample_value(up.value_type), 59_999, PaneTiming.ON_TIME, 0, 0, True,
                  False, 60_000)
    try:
        pairs = list(stage.from_upstream(sample))  # type: ignore[misc]
    except Exception:  # noqa: BLE001 - a mapper that needs real panes is not judged on a sample
        return []
    out = []
    for pair in pairs[:1]:
        if not isinstance(pair, tuple) or len(pair) != 2:
            return [f"stage {stage.output}: from_upstream must give (key, value) pairs, gave {pair!r}"]
        key, _ = pair
        parts = len(key) if isinstance(key, tuple) else 1
        if parts != len(stage.key_columns):
            out.append(f"stage {stage.output}: from_upstream gives keys of {parts} part(s) but key_columns names "
                       f"{len(stage.key_columns)} ({', '.join(stage.key_columns)}): make them match")
    return out


def _sample_value(spark_type: str | None) -> Any:
    t = (spark_type or "").lower()
    if t.startswith("decimal"):
        return Decimal(1)
    return {"double": 1.0, "float": 1.0, "string": "v", "boolean": True}.get(t, 1)


def resolve(spec: PipelineSpec, schema: TableSchema) -> PipelineSpec:
    """`spec` with the value types it left out inferred from its table (unchanged when none)."""
    stages, input_type = [], _value_input_type(spec, schema)
    for n, stage in enumerate(spec.stages):
        source = input_type if n == 0 else stage.input_type
        if stage.value_type is None and source is not None:
            stage = replace(stage, value_type=stage.strategy.combiner.output_type(source))
        stages.append(stage)
    if all(a is b for a, b in zip(stages, spec.stages)):
        return spec
    return replace(spec, stages=tuple(stages))


def check_warnings(spec: PipelineSpec) -> list[str]:
    """What fits but may not do what was meant, one line each: a stage of global windows
    whose trigger fires only when the watermark passes the window's end (the end of time,
    which an unbounded input never reaches) is computed by backfills but never updates live."""
    out = []
    for stage in spec.stages:
        s = stage.strategy
        if isinstance(s.window_fn, GlobalWindows) and not _fires_before_end_of_time(s.trigger):
            out.append(f"stage {stage.output}: global windows with trigger {s.trigger.describe()} fire only at the "
                       "end of input, so live runs never update it: give early firings (e.g. trigger="
                       "AfterWatermark(early=AfterProcessingTime(minutes(1))) and an accumulation mode) or finite "
                       "windows")
    return out


def _fires_before_end_of_time(trigger: Trigger) -> bool:
    """Whether `trigger` can fire in a window whose end the watermark never passes: counts,
    processing time and percentiles can; a bare watermark trigger and Never cannot. A
    trigger this does not know is taken to fire."""
    def can(t: Trigger) -> bool:
        return _fires_before_end_of_time(t)

    if isinstance(trigger, Never):
        return False
    if isinstance(trigger, AfterWatermark):
        return trigger.early is not None and can(trigger.early)
    if isinstance(trigger, Repeatedly):
        return can(trigger.trigger)
    if isinstance(trigger, OrFinally):
        return can(trigger.trigger) or can(trigger.until)
    if isinstance(trigger, AfterEach):
        return can(trigger.children[0])
    if isinstance(trigger, AfterFirst):
        return any(can(c) for c in trigger.children)
    if isinstance(trigger, AfterAll):
        return all(can(c) for c in trigger.children)
    return True  # AfterCount, processing time, AfterPercentileWatermark, a user's trigger


def preflight(name: str, warehouse: str | None = None) -> PipelineSpec:
    """Check registered pipeline `name` against its input table (before Spark); raises
    `PipelineMistakes` with every mistake, else registers and returns it with its value
    types inferred."""
    from dataflow_core.pipelines.registry import get, replace_registered
    from dataflow_core.spark.platform.session import resolve_warehouse

    spec = get(name)
    root = resolve_warehouse(warehouse)
    try:
        schema = read_schema(root, spec.input_table)
    except DataflowError as exc:
        raise PipelineMistakes(spec.name, [str(exc)]) from None
    if schema is None:
        return spec
    mistakes = check_pipeline(spec, schema)
    if mistakes:
        raise PipelineMistakes(spec.name, mistakes)
    resolved = resolve(spec, schema)
    if resolved is not spec:
        replace_registered(resolved)
    return resolved


def with_value_types(name: str, warehouse: str) -> PipelineSpec:
    """Registered pipeline `name` with every stage's value type known: as registered when its
    definition gives them, else checked and inferred from its input table in `warehouse` as
    the CLI's `preflight` does (a job called from Python gets the same types as the CLI's)."""
    from dataflow_core.pipelines.registry import get

    spec = get(name)
    return spec if all(stage.value_type is not None for stage in spec.stages) else preflight(name, warehouse)
