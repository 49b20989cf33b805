"""A batch backfill's corrections carried into the live state of micro-batches.

A backfill over a range that micro-batches already covered rewrites their results (and,
in retracting mode, retracts what they had said). So that later micro-batches carry on from
the corrected figures and not the stale ones, every corrected key's state adopts the
corrections (`KeyedWindowSet.restate`: accumulators rebuilt from the backfill's input, the
backfill's pane as the window's last one, nothing pending), and the event ids the backfill
counted join the micro-batches' seen ids, so that a row it counted which the stream has yet
to deliver is a duplicate then, not counted twice.

A backfill refuses to run while a micro-batch of the pipeline is unfinished: both would
rewrite the same state.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.model.group_by_window import Element
from dataflow_core.model.time import Instant
from dataflow_core.pipelines import PipelineSpec, StageSpec
from dataflow_core.spark.platform.tables import table_exists
from dataflow_core.spark.input.upstream import PANE_FIELDS, pane_from_row

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CORRECTION_COLUMNS = ("present", *PANE_FIELDS)
"""Per corrected window (times in ms): `present` false when the window no longer exists,
else the pane the backfill wrote."""


def live_watermarks(spark: "SparkSession", spec: PipelineSpec) -> dict[str, Instant] | None:
    """Each stage's input watermark after the last finished micro-batch (None when the
    pipeline never ran live); refuses while a micro-batch is unfinished."""
    from dataflow_core.spark.jobs.microbatch import _records

    records = _records(spark, spec)
    if not records:
        return None
    if records[0]["status"] == "started":
        raise DataflowError(
            f"pipeline {spec.name!r}: micro-batch {records[0]['batch']} has not finished (running, or "
            f"crashed: `dataflow microbatch --pipeline {spec.name}` completes it); a backfill now would "
            "race it for the live state"
        )
    return json.loads(records[0]["watermarks"])


def restate(
    spark: "SparkSession", spec: PipelineSpec, stage: StageSpec, corrections: "DataFrame",
    elements: "DataFrame", watermark: Instant, run_id: str,
) -> None:
    """Apply the corrections of `stage` to its live state (see the module docstring).
    `elements` has the key columns, `value`, `event_ms` and optionally `retraction`."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    from dataflow_core.spark.execute.keyed_stage import OUTPUT_FIELDS, KeyCodec, decode_state, state_row
    from dataflow_core.spark.jobs.microbatch import state_table, write_state
    from dataflow_core.spark.platform.tables import read_table

    name = state_table(stage)
    if not table_exists(spark, name):
        return
    keys = list(stage.key_columns)
    codec = KeyCodec(stage.key_columns)
    strategy = stage.strategy
    fixed = corrections.select(*keys, *CORRECTION_COLUMNS)
    touched = fixed.select(*keys).distinct()
    retraction = F.col("retraction") if "retraction" in elements.columns else F.lit(False)
    inputs = elements.join(touched, keys, "left_semi").select(
        *keys, F.col("value").alias("el_value"), "event_ms", retraction.alias("retraction"))
    both = fixed.unionByName(inputs, allowMissingColumns=True)
    states = read_table(spark, name).select(*keys, "state")
    key_fields = ", ".join(f"`{c}` {both.schema[c].dataType.simpleString()}" for c in keys)
    schema = f"{key_fields}, {OUTPUT_FIELDS.format(value_type=stage.value_type)}"
    arrow_schema = to_arrow_schema(_parse_datatype_string(schema))

    def one_key(key_scalars: tuple, table: "pa.Table", state: "pa.Table") -> "pa.Table":
        if not table.num_rows or table.column("present").null_count == table.num_rows:
            return arrow_schema.empty_table()
        row_key = [k.as_py() for k in key_scalars]
        key = codec.key(row_key)
        ks = decode_state(key, strategy, state.column("state")[0].as_py() if state.num_rows else None)
        fixes, els = [], []
        for r in table.to_pylist():
            if r["present"] is None:
                els.append(Element(r["el_value"], r["event_ms"], bool(r["retraction"])))
                continue
            pane = pane_from_row(tuple(row_key), r)
            fixes.append((pane.window, pane if r["present"] else None))
        ks.restate(fixes, els, watermark)
        row = state_row(dict(zip(keys, row_key)), ks, watermark)
        return pa.Table.from_pylist([row], schema=arrow_schema)

    out = both.groupBy(*keys).cogroup(states.groupBy(*keys)).applyInArrow(one_key, schema)
    write_state(spark, stage, out, -1, (f"dataflow:{spec.name}:{name}:{run_id}", 0))


def mark_seen(
    spark: "SparkSession", spec: PipelineSpec, stage: StageSpec, corrections: "DataFrame", elements: "DataFrame",
    run_id: str,
) -> None:
    """The event ids of the elements inside the corrected windows join the micro-batches'
    seen ids (batch -1: a backfill's)."""
    from dataflow_core.spark.jobs.microbatch import remember_ids, seen_table

    keys = list(stage.key_columns)
    windows = corrections.where("present AND window_start IS NOT NULL").select(
        *[corrections[k].alias(f"_w_{k}") for k in keys], "window_start", "window_end")
    cond = [elements[k].eqNullSafe(windows[f"_w_{k}"]) for k in keys] + [
        elements["event_ms"] >= windows["window_start"], elements["event_ms"] < windows["window_end"]]
    inside = elements.join(windows, cond, "left_semi")
    remember_ids(spark, spec, inside, -1, (f"dataflow:{spec.name}:{seen_table(spec)}:{run_id}", 0))
