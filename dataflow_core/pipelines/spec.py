"""What a pipeline is, checked when it is defined (not when it runs)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from dataflow_core.errors import DataflowError
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.pipeline import PaneMapper, Pipeline, Stage
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import Duration, format_duration, parse_duration
from dataflow_core.model.watermarks import WatermarkEstimator

_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class StageSpec:
    """One GroupByKeyAndWindow: its strategy, its key columns, its output tables' name.

    `value_type` is the Spark SQL type of the panes' values. A later stage's `from_upstream`
    turns each upstream pane into (key, value) elements; `input_type` is their values' type.
    """

    output: str
    strategy: WindowingStrategy
    key_columns: tuple[str, ...]
    value_type: str
    from_upstream: PaneMapper | None = None
    input_type: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.output):
            raise DataflowError(f"stage output {self.output!r}: use lower-case letters, digits and underscores")
        if not self.key_columns or isinstance(self.key_columns, str):
            raise DataflowError(f"stage {self.output!r}: key_columns must be a non-empty tuple of column names")

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
    """A pipeline over one Delta input table.

    Column settings are Spark SQL expressions over the input's columns: `key` maps each
    key column of the first stage to its expression (usually the column itself), `value`
    gives the element's value, `where` selects the rows that are input at all (rows it
    leaves out are neither counted nor bad). Rows whose event time is more than `max_skew`
    after their ingest time are quarantined.
    """

    name: str
    input_table: str
    key: dict[str, str]
    value: str
    stages: tuple[StageSpec, ...]
    watermark: Callable[[], WatermarkEstimator]
    description: str = ""
    where: str | None = None
    event_time: str = "event_time"
    ingest_time: str = "ingest_time"
    event_id: str = "event_id"
    partition_column: str | None = "event_date"
    quality_suite: str | None = "video_events"
    max_skew: Duration = parse_duration("1h")
    model: Pipeline = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise DataflowError(f"pipeline name {self.name!r}: use lower-case letters, digits and underscores")
        if not self.stages:
            raise DataflowError(f"pipeline {self.name!r} has no stages")
        first = self.stages[0]
        if tuple(self.key) != first.key_columns:
            raise DataflowError(
                f"pipeline {self.name!r}: key {list(self.key)} must name the first stage's key columns {list(first.key_columns)}"
            )
        outputs = [s.output for s in self.stages]
        if len(set(outputs)) != len(outputs):
            raise DataflowError(f"pipeline {self.name!r}: stage outputs must differ, got {outputs}")
        for stage in self.stages[1:]:
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
            lines.append(f"  stage {s.output} (tables {s.output}_panes" + f", {s.output})")
            lines.append(f"    key {', '.join(s.key_columns)}; what {a['what']}; where {a['where']}; when {a['when']}; how {a['how']}")
        return lines
