"""Whether a stored plan still stands: only a change to what it was diffed against stales it.

A plan (`jobs.plans`) is the diff of a range's recomputation against the pipeline's tables as
they stood. On a live pipeline those tables take a commit every few minutes (micro-batches of
later hours, OPTIMIZE, a definition recorded), and a plan refused whenever a version moved
could never be approved by a human in time. So, per table whose version moved since the plan:

- commits that change no data (OPTIMIZE's rewrites, VACUUM, table properties: no `add` or
  `remove` with `dataChange`) leave it standing;
- otherwise the table's rows in the plan's footprint are compared as of then and now: the
  input's rows of the event-time range the backfill reads, the seen ids of that range, and
  the rows of every stage's pane log, results and live state whose windows overlap the range
  (a later stage's window overlapping it may hold the range's panes). Rows rewritten
  unchanged (a MERGE's untouched rows) are equal; the plan is stale only when some differ,
  and the refusal says how many.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.input.rows import EventRange, in_range
from dataflow_core.spark.input.fields import with_fields
from dataflow_core.spark.jobs.range_input import read_margins
from dataflow_core.spark.platform.delta import read_as_of
from dataflow_core.spark.platform.driver_delta import commit_actions
from dataflow_core.spark.platform.tables import table_path
from dataflow_core.spark.sinks.pipeline_lock import input_key, pipeline_tables
from dataflow_core.spark.sinks.live_state import state_table
from dataflow_core.spark.sinks.seen_ids import seen_table

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass(frozen=True)
class Moved:
    """A table of a plan's footprint that changed since the plan: `rows` differ (in or out)."""

    table: str
    then: int
    now: int
    rows: int
    is_input: bool = False

    def describe(self) -> str:
        what = f"input table {self.table}" if self.is_input else f"output table {self.table}"
        return f"{what} changed {self.rows:,} row(s) of the plan's range (version {self.then} -> {self.now})"


def stale_tables(spark: "SparkSession", spec: PipelineSpec, planned: dict[str, int], now: dict[str, int],
                 span: EventRange, read: EventRange) -> list[Moved]:
    """The tables of `planned` (name -> version the plan was made from) whose data in the
    plan's footprint differs at `now`'s versions; `span` is the plan's range, `read` the
    event-time range its backfill reads."""
    moved = []
    own = set(pipeline_tables(spec))
    for key, then in sorted(planned.items()):
        is_input = key == input_key(spec.name)
        name = spec.input_table if is_input else key
        current = now.get(key, -1)
        if current == then or (not is_input and name not in own):
            continue
        if then >= 0 and current >= 0 and not _changes_data(spark, name, then, current):
            continue
        footprint = _footprint(spec, name, span, read, is_input)
        differing = _differing_rows(spark, name, then, current, footprint)
        if differing:
            moved.append(Moved(name, then, current, differing, is_input))
    return moved


def _changes_data(spark: "SparkSession", name: str, then: int, now: int) -> bool:
    """Whether any commit after `then` up to `now` adds or removes data (a commit whose log
    file is gone counts as changing it)."""
    path = table_path(spark, name)
    for version in range(then + 1, now + 1):
        try:
            actions = commit_actions(path, version)
        except (FileNotFoundError, OSError):
            return True
        for action in actions:
            for kind in ("add", "remove", "cdc"):
                if kind in action and action[kind].get("dataChange", True):
                    return True
    return False


def _overlapping(start: str, end: str, span: EventRange) -> "Column":
    """Rows whose window [start, end) overlaps `span` (a global window's open ends do)."""
    from pyspark.sql import functions as F

    s, e = F.unix_millis(F.col(start)), F.unix_millis(F.col(end))
    return (e.isNull() | (e > F.lit(span.start))) & (s.isNull() | (s < F.lit(span.end)))


def _footprint(spec: PipelineSpec, name: str, span: EventRange, read: EventRange, is_input: bool):
    """A function from the table's rows to those a plan of `span` was diffed against."""
    from pyspark.sql import functions as F

    if is_input:
        def input_rows_read(df: "DataFrame") -> "DataFrame":
            return with_fields(spec, df).where(in_range(spec, read)).select(*[F.col(f"`{c}`") for c in df.columns])
        return input_rows_read
    if name == seen_table(spec):
        return lambda df: df.where((F.col("event_ms") >= read.start) & (F.col("event_ms") < read.end))
    for stage in spec.stages:
        if name == state_table(stage):
            keys = list(stage.key_columns)
            def windows_in_span(df: "DataFrame") -> "DataFrame":
                inside = F.filter("windows", lambda w: (
                    (w["window_end"].isNull() | (F.unix_millis(w["window_end"]) > F.lit(span.start)))
                    & (w["window_start"].isNull() | (F.unix_millis(w["window_start"]) < F.lit(span.end)))))
                return df.select(*keys, inside.alias("windows")).where(F.size("windows") > 0)
            return windows_in_span
    return lambda df: df.where(_overlapping("window_start", "window_end", span))


def _differing_rows(spark: "SparkSession", name: str, then: int, now: int, footprint) -> int:
    """Rows of the footprint in one version and not the other (as multisets)."""
    before, after = read_as_of(spark, name, then), read_as_of(spark, name, now)
    if before is None or after is None:
        present = after if before is None else before
        return 0 if present is None else footprint(present).count()
    common = [c for c in before.columns if c in set(after.columns)]
    a, b = footprint(before.select(*common)), footprint(after.select(*common))
    return a.exceptAll(b).count() + b.exceptAll(a).count()


def span_read(spec: PipelineSpec, span: EventRange) -> EventRange:
    """The event-time range a batch backfill of `span` reads first: its windows' reach past
    the range (`range_input.read_margins`)."""
    return span.widened(*read_margins(spec.stages[0].strategy.window_fn))

