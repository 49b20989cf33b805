"""A stage's definition, recorded with its tables: a run refuses to carry on state or pane
history written under another definition.

A stage's live state (`<output>__state`) and pane log (`<output>_panes`) hold windows,
accumulators and pane histories whose meaning is the stage's window, trigger, accumulation,
lateness and combiner (`WindowingStrategy.definition`). Edited between runs (a 1 h window
made 30 min), the next run would fire the old windows' state while new rows go to new
windows, and the results would hold both. So the definition is recorded as a Delta table
property of each table when a run first writes it (a table made again by `dataflow reset`
records afresh), and every backfill and micro-batch compares it before it reads or writes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.model.strategy import definition_changes
from dataflow_core.pipelines import PipelineSpec, StageSpec
from dataflow_core.spark.platform.tables import latest_snapshot, table_path
from dataflow_core.spark.sinks.live_state import state_table
from dataflow_core.spark.sinks.panes import panes_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROPERTY = "dataflow.definition"
"""The table property holding the definition (JSON) the table was written under."""


class DefinitionChanged(DataflowError):
    """A stage whose tables were written under another definition than the pipeline's now."""


def stage_tables(stage: StageSpec) -> tuple[str, ...]:
    """The tables whose contents mean what the stage's definition says: its pane log,
    results and live state."""
    return panes_table(stage), stage.output, state_table(stage)


def _recorded(spark: "SparkSession", path: str) -> tuple[bool, dict | None]:
    """(whether there is a table at `path`, the definition it records or None)."""
    snapshot = latest_snapshot(spark, path)
    if int(snapshot.version()) < 0:
        return False, None
    found = snapshot.metadata().configuration().get(PROPERTY)
    return True, (json.loads(found.get()) if found.isDefined() else None)


_recorded_paths: set[str] = set()
"""Table paths this process found or made recorded, so `record_definitions` asks each table
once. A table deleted and made again (`dataflow reset`) is checked by the next run's
`refuse_changed_definitions`, which finds it unrecorded and drops it from here."""


def _sql_text(value: str) -> str:
    """`value` as the body of a Spark SQL string literal in single quotes."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


def record_definitions(spark: "SparkSession", spec: PipelineSpec) -> None:
    """Record each stage's definition on its tables that hold none (a table property: one
    metadata commit, once in a table's life). Called by a run after its writes, while it
    still has the pipeline locked; a run that dies before recording leaves the tables it made
    unrecorded, and the next run records its own definition there."""
    for stage in spec.stages:
        text = _sql_text(json.dumps(stage.strategy.definition(), sort_keys=True))
        for name in stage_tables(stage):
            path = table_path(spark, name)
            if path in _recorded_paths:
                continue
            exists, recorded = _recorded(spark, path)
            if not exists:
                continue
            if recorded is None:
                spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{PROPERTY}' = '{text}')")
            _recorded_paths.add(path)


def refuse_changed_definitions(spark: "SparkSession", spec: PipelineSpec) -> None:
    """Raise `DefinitionChanged` in one line when a stage's tables were written under a
    definition that differs from the stage's now: what changed, and the two ways on (start
    over from the input, or put the old definition back). Reads only."""
    for stage in spec.stages:
        current = stage.strategy.definition()
        for name in stage_tables(stage):
            path = table_path(spark, name)
            exists, recorded = _recorded(spark, path)
            if exists and recorded is not None:
                _recorded_paths.add(path)
            else:
                _recorded_paths.discard(path)
            changes = definition_changes(recorded or {}, current)
            if changes:
                raise DefinitionChanged(
                    f"pipeline {spec.name!r}: stage {stage.output} was defined differently when table {name} was "
                    f"written ({'; '.join(changes)}); its windows cannot carry on under the new definition: start "
                    f"over with `dataflow reset --pipeline {spec.name} --drop-outputs` and a backfill from the input "
                    f"(`dataflow backfill --pipeline {spec.name} --start ... --end ...`), or put the old definition "
                    "back; nothing was read or written"
                )
