"""`<output>__state`: per key, the live state micro-batches carry between batches.

`state` is the key's `KeyedWindowSet.to_state` as JSON text (versioned data, never a
pickle) with `state_version` beside it; `wake_timer` and `wake_watermark` say when the key
next needs a visit (the table is clustered on them, so finding a batch's due keys skips the
files of the rest); `hold` is what the key holds a downstream watermark at; `windows` is a
readable list of its windows for SQL users.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.model.state_codec import READABLE_VERSIONS, STATE_VERSION
from dataflow_core.model.time import END_OF_TIME, Instant, is_due
from dataflow_core.pipelines import StageSpec
from dataflow_core.pipelines import layout
from dataflow_core.spark.platform import driver_delta
from dataflow_core.spark.platform.delta import Txn, merge_rows, read_as_of
from dataflow_core.spark.platform.tables import snapshot_identity, table_exists, table_path

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

WAKE_COLUMNS = ("wake_timer", "wake_watermark")


def state_table(stage: StageSpec) -> str:
    return layout.state(stage)


def read_states(spark: "SparkSession", stage: StageSpec, version: int) -> "DataFrame | None":
    """The stage's live state as of `version` (None before the first batch); refuses state
    this build cannot read, naming the table and the way out."""
    from pyspark.sql import functions as F

    states = read_as_of(spark, state_table(stage), version)
    if states is None:
        return None
    name = state_table(stage)
    if "state_version" not in states.columns or dict(states.dtypes).get("state") != "string":
        raise DataflowError(
            f"table {name} holds live state in an older format (pickled, before state version "
            f"{STATE_VERSION}); drop the pipeline's live state (`dataflow reset`) and backfill, or run the "
            "version that wrote it"
        )
    checked = (snapshot_identity(spark, table_path(spark, name))[0], version)
    if checked in _readable:
        return states
    unknown = states.where(~F.col("state_version").isin(*READABLE_VERSIONS)).select("state_version").limit(1).collect()
    if unknown:
        raise DataflowError(
            f"table {name} holds live state of format version {unknown[0]['state_version']}; this build reads "
            f"version {' or '.join(map(str, READABLE_VERSIONS))} only"
        )
    _readable.add(checked)
    return states


_readable: set[tuple[str, int]] = set()
"""(Delta table id, version) of state tables found to hold only this build's state version: a
version's contents never change, so a batch's stages (and the next stage's hold spans) ask once."""


def due(time: Instant, watermark: Instant) -> "Column":
    """A state row whose key has something due at a step at processing time `time` with the
    watermark at `watermark`: a processing-time timer before that time, or a watermark
    deadline the watermark reaches (`model.time.is_due`)."""
    from pyspark.sql import functions as F

    return is_due(F.col("wake_timer"), F.col("wake_watermark"), F.lit(time), F.lit(watermark))


@dataclass(frozen=True)
class Wake:
    """When the earliest key of a stage's live state next needs a visit: its least
    processing-time timer and least watermark deadline (None: no key has one)."""

    timer: Instant | None
    watermark: Instant | None

    def due(self, time: Instant, watermark: Instant) -> bool:
        """Whether `due` holds for some key (the same rule, on the least values)."""
        return bool(is_due(self.timer, self.watermark, time, watermark))


def next_wake(spark: "SparkSession", stage: StageSpec) -> Wake | None:
    """The stage's `Wake` as of its state table's latest version (None before the first
    batch). A version's contents never change, so the state is read once per version, not
    at every interval of an idle `--loop` that asks whether anything is due. It is read on
    the driver through delta-rs, three columns and no Spark job: through Spark, Delta's
    snapshot of the new version and the query would take a `--loop`'s cores after every
    batch. A table delta-rs cannot read (deletion
    vectors) or holding state of a format this build cannot read is read through Spark, which
    names what is wrong."""
    import pyarrow.compute as pc
    from deltalake.exceptions import DeltaProtocolError

    path = table_path(spark, state_table(stage))
    table = driver_delta.open_table(path)
    if table is None:
        return None
    identity = driver_delta.identity(table)
    cached = _wakes.get(path)
    if cached is not None and cached[0] == identity:
        return cached[1]
    current = {"state_version", *WAKE_COLUMNS} <= {field.name for field in table.schema().fields}
    try:
        found = driver_delta.read(table, (*WAKE_COLUMNS, "state_version")) if current else None
    except DeltaProtocolError:
        found = None
    if found is not None and not set(pc.unique(found["state_version"]).to_pylist()) <= set(READABLE_VERSIONS):
        found = None  # state this build cannot read: refused through Spark, with the table's name
    if found is None:
        wake = _wake_through_spark(spark, stage, identity[1])
    else:
        wake = Wake(*(pc.min(found[c]).as_py() for c in WAKE_COLUMNS))
    _wakes[path] = (identity, wake)
    return wake


def _wake_through_spark(spark: "SparkSession", stage: StageSpec, version: int) -> Wake:
    from pyspark.sql import functions as F

    row = read_states(spark, stage, version).agg(  # type: ignore[union-attr]
        *(F.min(c).alias(c) for c in WAKE_COLUMNS)).first()
    return Wake(*(row[c] for c in WAKE_COLUMNS))


_wakes: dict[str, tuple[tuple[str, int], Wake]] = {}
"""Per state table path: the (table id, version) last summarised and its Wake."""


def write_state(spark: "SparkSession", stage: StageSpec, out: "DataFrame", batch: int, txn: Txn) -> None:
    """MERGE the `'state'` rows of a stage's output into its state table (a key whose state
    is null holds no window any more and is deleted)."""
    from pyspark.sql import functions as F

    ts = lambda c: F.when(F.abs(F.col(c)) < F.lit(END_OF_TIME - 1), F.timestamp_millis(F.col(c)))  # noqa: E731
    state_rows = out.where("kind = 'state'").select(
        *stage.key_columns, "state", "state_version", "wake_timer", "wake_watermark", "hold",
        ts("wake_timer").alias("next_timer_at"), ts("wake_watermark").alias("next_watermark_at"),
        F.transform("windows", lambda w: F.struct(
            F.timestamp_millis(w["window_start"]).alias("window_start"),
            F.timestamp_millis(w["window_end"]).alias("window_end"),
            w["pending"].alias("pending_elements"), w["next_index"].alias("panes_emitted"),
            F.timestamp_millis(w["next_timer"]).alias("next_timer"), w["closed"].alias("closed"),
        )).alias("windows"),
        F.lit(batch).alias("batch"),
        F.col("state").isNull().alias("_delete"),
    )
    name = state_table(stage)
    path = table_path(spark, name)
    before = snapshot_identity(spark, path) if table_exists(spark, name) else None
    merge_rows(spark, name, state_rows, list(stage.key_columns), delete=True, update=True,
               txn=txn, cluster_by=WAKE_COLUMNS)
    if before in _readable:  # what this build merged onto a version of its own state is of its own state
        after = snapshot_identity(spark, path)
        if after == (before[0], before[1] + 1):
            _readable.add(after)
