"""What a pipeline is, checked when it is defined (not when it runs)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from dataflow_core.errors import DataflowError
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.input_rules import DEFAULT_MAX_DUPLICATE_SHARE
from dataflow_core.model.pipeline import PaneMapper, Pipeline, Stage
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import Duration, format_duration, parse_duration
from dataflow_core.model.watermarks import WatermarkEstimator, spark_refusal
from dataflow_core.pipelines.layout import panes as panes_table, results as results_table
from dataflow_core.pipelines.types import declared_type

_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class StageSpec:
    """One GroupByKeyAndWindow: its strategy, its key columns, its output tables' name. Users
    build it with `dataflow_core.api.stage` (the one way to define a pipeline); runners take it.

    `value_type` is the type of the panes' values: a Python type (`int`, `float`, `Decimal`,
    `str`, `bool`), a Spark SQL type name (`"decimal(28,3)"`), or omitted where the
    combiner's output type is fixed (a count's is `int`) or the input table tells (the
    first stage: `dataflow check` and every command infer it before Spark starts). A later
    stage's `from_upstream` turns each upstream pane into (key, value) elements;
    `input_type` is their values' type. The first stage's `key_columns` are the pipeline's
    `key` (name them there only); a later stage names the key its `from_upstream` gives.
    """

    output: str
    strategy: WindowingStrategy
    key_columns: tuple[str, ...] = ()
    value_type: Any = None
    from_upstream: PaneMapper | None = None
    input_type: Any = None
    description: str = ""

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.output):
            raise DataflowError(f"stage output {self.output!r}: use lower-case letters, digits and underscores")
        keys = (self.key_columns,) if isinstance(self.key_columns, str) else tuple(self.key_columns)
        object.__setattr__(self, "key_columns", keys)
        value_type = self.value_type if self.value_type is not None else self.strategy.combiner.output_type(None)
        object.__setattr__(self, "value_type", declared_type(value_type, f"stage {self.output!r}: value_type"))
        object.__setattr__(self, "input_type", declared_type(self.input_type, f"stage {self.output!r}: input_type"))

    @property
    def keeps_results(self) -> bool:
        """Whether the stage has a current-results table: every stage has one. A discarding
        stage whose combiner's outputs do not merge (no `CombineFn.output_merge`) keeps each
        window's latest pane there (docs/model.md, "Discarding panes that do not merge")."""
        return True

    @property
    def retracting(self) -> bool:
        return self.strategy.accumulation is AccumulationMode.RETRACTING

    def answers(self) -> dict[str, str]:
        """The paper's four questions, answered for this stage."""
        s = self.strategy
        return {
            "what": s.combiner.name,
            "where": s.window_fn.describe(),
            "when": f"{s.trigger.describe()}, allowed lateness {format_duration(s.allowed_lateness)}",
            "how": s.accumulation.value,
        }


@dataclass(frozen=True)
class PipelineSpec:
    """A pipeline over one Delta input table, as `dataflow_core.api.pipeline` builds and
    registers it (the one way to define one); runners take it.

    Column settings are Spark SQL expressions over the input's columns: `key` names the
    key column(s) once (a column name, a tuple of names, or a dict of column -> expression),
    and they are the first stage's key columns; `value` gives the element's value, `where`
    selects the rows that are input at all (rows it leaves out are neither counted nor
    bad). Rows whose event time is more than `max_skew` (any of `parse_duration`'s forms) after
    their ingest time are quarantined. `partition_column` (a date column the table is partitioned by, for
    pruning) and `quality_suite` (an `expectations/<name>.json` the input rows must pass)
    are used only when given. `watermark` is an estimator, or a function making a fresh one.
    `max_duplicate_share` is the largest share of a backfill's range or a micro-batch's rows
    that may be duplicate deliveries (`model.input_rules.DuplicateShare`): more fails the
    input gate and the micro-batch.
    """

    name: str
    input_table: str
    key: Any
    value: str
    stages: tuple[StageSpec, ...]
    watermark: Any
    description: str = ""
    where: str | None = None
    event_time: str = "event_time"
    ingest_time: str = "ingest_time"
    event_id: str = "event_id"
    partition_column: str | None = None
    quality_suite: str | None = None
    max_skew: "Duration | str" = parse_duration("1h")
    max_duplicate_share: float = DEFAULT_MAX_DUPLICATE_SHARE
    model: Pipeline = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise DataflowError(f"pipeline name {self.name!r}: use lower-case letters, digits and underscores")
        object.__setattr__(self, "key", _key_expressions(self.key, self.name))
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "watermark", _estimator_factory(self.watermark))
        try:  # any of `parse_duration`'s forms; refused here, not later inside Spark
            object.__setattr__(self, "max_skew", parse_duration(self.max_skew, "max_skew"))
        except ValueError as exc:
            raise DataflowError(f"pipeline {self.name!r}: {exc}") from None
        if not isinstance(self.max_duplicate_share, (int, float)) or not 0 <= self.max_duplicate_share <= 1:
            raise DataflowError(f"pipeline {self.name!r}: max_duplicate_share {self.max_duplicate_share!r}: give a share "
                                "between 0 and 1 (1 accepts any share of duplicate deliveries)")
        if not callable(self.watermark):
            raise DataflowError(f"pipeline {self.name!r}: watermark: give an estimator (e.g. "
                                f"HeuristicWatermark(bound='2m')) or a function making one, not {self.watermark!r}")
        if (refusal := spark_refusal(self.watermark())) is not None:  # the Spark runners must be able to feed it
            raise DataflowError(f"pipeline {self.name!r}: {refusal}")
        if not self.stages:
            raise DataflowError(f"pipeline {self.name!r} has no stages")
        first = self.stages[0]
        if not first.key_columns:
            first = replace(first, key_columns=tuple(self.key))
            object.__setattr__(self, "stages", (first, *self.stages[1:]))
        if tuple(self.key) != first.key_columns:
            raise DataflowError(
                f"pipeline {self.name!r}: key {list(self.key)} must name the first stage's key columns {list(first.key_columns)}"
            )
        outputs = [s.output for s in self.stages]
        if len(set(outputs)) != len(outputs):
            raise DataflowError(f"pipeline {self.name!r}: stage outputs must differ, got {outputs}")
        for stage in self.stages[1:]:
            if not stage.key_columns:
                raise DataflowError(f"stage {stage.output!r}: key_columns: name the key its from_upstream gives")
            if stage.input_type is None:
                raise DataflowError(f"stage {stage.output!r}: a later stage needs input_type (its elements' value type)")
        try:
            model = Pipeline.of(*(Stage(s.output, s.strategy, s.from_upstream) for s in self.stages))
        except ValueError as exc:
            raise DataflowError(f"pipeline {self.name!r}: {exc}") from None
        object.__setattr__(self, "model", model)

    def stage(self, output: str) -> StageSpec:
        for s in self.stages:
            if s.output == output:
                return s
        raise DataflowError(
            f"pipeline {self.name!r} has no stage {output!r} (stages: {', '.join(s.output for s in self.stages)})"
        )

    def describe(self) -> list[str]:
        lines = [f"{self.name}: {self.description}".rstrip(": "), f"  input: table {self.input_table}"
                 + (f" where {self.where}" if self.where else "")
                 + f", key {', '.join(self.key)}, value {self.value}, watermark {self.watermark().describe()}"]
        for s in self.stages:
            a = s.answers()
            lines.append(f"  stage {s.output} (tables {panes_table(s)}, {results_table(s)})")
            lines.append(f"    key {', '.join(s.key_columns)}; what {a['what']}; where {a['where']}; when {a['when']}; how {a['how']}")
        return lines


def _key_expressions(key: Any, pipeline: str) -> dict[str, str]:
    """`key` as column -> expression: a name, a sequence of names, or a mapping."""
    if isinstance(key, str):
        key = (key,)
    if isinstance(key, Mapping):
        out = {str(c): str(e) for c, e in key.items()}
    elif isinstance(key, Sequence):
        out = {str(c): str(c) for c in key}
    else:
        raise DataflowError(f"pipeline {pipeline!r}: key: give a column name, a tuple of names or a dict, not {key!r}")
    if not out:
        raise DataflowError(f"pipeline {pipeline!r}: key: name at least one column")
    return out


def _estimator_factory(watermark: Any) -> Callable[[], WatermarkEstimator]:
    """An estimator given as is becomes a function making a fresh copy of it each run."""
    if isinstance(watermark, WatermarkEstimator):
        import copy

        template = copy.deepcopy(watermark)
        return lambda: copy.deepcopy(template)
    return watermark
