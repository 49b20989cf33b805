"""A pipeline's stages one after another on one schedule: what a micro-batch and an
arrival-order replay share.

Each stage runs per key (`execute.keyed_stage`) on its arrivals; the next stage's arrivals
are its panes (`input.upstream`), and its schedule is this one's held back by the keys'
watermark holds (`runners.schedule.downstream_schedule`), so a later stage never sees its
watermark pass a pane an earlier stage has yet to emit. How a stage finds its keys (every
key of a replay, the woken keys of a micro-batch) and what it writes are the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from dataflow_core.model.pane_codec import REPLACES
from dataflow_core.model.time import Instant
from dataflow_core.pipelines import PipelineSpec, StageSpec
from dataflow_core.runners.keyed import carried_hold_spans
from dataflow_core.runners.schedule import HoldSpan, Schedule, downstream_schedule
from dataflow_core.spark.execute.keyed_stage import COUNTED, HOLD_FIELDS, hold_span
from dataflow_core.spark.input.upstream import elements_from_panes
from dataflow_core.spark.platform import aggregates
from dataflow_core.spark.sinks.runs import Ledger

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@dataclass
class StageOutput:
    """One stage's output rows (`execute.keyed_stage`: panes, state, stats and holds) and,
    for a micro-batch, the holds of the keys it did not run (one row, `idle`), which hold
    the next stage back where they stood. `count` fills `holds` and `idle_holds`."""

    stage: StageSpec
    out: "DataFrame"
    idle: "DataFrame | None" = None
    holds: list[HoldSpan] = field(default_factory=list)
    idle_holds: list[Instant] = field(default_factory=list)


@dataclass(frozen=True)
class StageCounts:
    """A stage's panes and retractions, and the elements it took and dropped as too late."""

    panes: int
    retractions: int
    elements: int
    dropped_elements: int
    first_window_end: Instant | None  # the earliest window a pane of this stage closes or declares merged away
    input_retractions: tuple[int, int] = (0, 0)  # of elements and dropped elements, the retractions


RunStage = Callable[[StageSpec, "DataFrame | None", Schedule, bool], StageOutput]
"""(stage, arrivals or None for none, schedule, whether it is the first stage) -> its output."""
WriteStage = Callable[[StageOutput, StageCounts, Schedule], None]
"""Writes a stage's output (its panes, results, state) once it has been counted."""


def first_arrivals(els: "DataFrame", stage: StageSpec, seq: "Column", at_ms: "Column",
                   retraction: bool = False) -> "DataFrame":
    """The first stage's arrivals: the accepted elements (or, `retraction`, the counted
    elements an input change takes back out), each with the sub-step it arrives at (`seq`)
    and its processing time (`at_ms`), and the windows that hold it already (`counted`)
    where the elements say."""
    from pyspark.sql import functions as F

    return els.select(*stage.key_columns, "value", "event_ms", F.lit(retraction).alias("retraction"),
                      seq.alias("seq"), at_ms.alias("at_ms"), *([COUNTED] if COUNTED in els.columns else []))


def run_chain(spec: PipelineSpec, arrivals: "DataFrame | None", schedule: Schedule, run: RunStage,
              write: WriteStage, ledger: Ledger, start: Callable[[StageSpec], Instant | None] = lambda _s: None,
              ) -> dict[str, Instant]:
    """Every stage of `spec` in turn, the first on `arrivals`, each later one on its
    upstream's panes under the watermark its upstream's holds leave (from `start(stage)`,
    where the stage's watermark stood; None: where its upstream's did). Counts each stage
    into `ledger` and hands it to `write`. Returns each stage's output watermark at the end."""
    watermarks: dict[str, Instant] = {}
    upstream: StageOutput | None = None
    for stage in spec.stages:
        if upstream is not None:
            schedule = downstream_schedule(schedule, _spans(upstream, schedule), start=start(stage))
            arrivals = _next_arrivals(upstream, stage)
        current = run(stage, arrivals, schedule, upstream is None)
        counts = count(current)
        write(current, counts, schedule)
        ledger.add_stage(stage.output, counts.panes, counts.retractions,
                         counts.elements if upstream is None else None, counts.dropped_elements,
                         input_retractions=counts.input_retractions if upstream is None else (0, 0))
        if upstream is not None:
            upstream.out.unpersist()
        upstream = current
        watermarks[stage.output] = schedule.steps[-1].watermark if schedule.steps else schedule.start
    if upstream is not None:
        upstream.out.unpersist()
    return watermarks


def count(current: StageOutput) -> StageCounts:
    """The stage's counts, and its hold spans and idle keys' holds kept on `current` for the
    next stage: one Spark job for all."""
    from pyspark.sql import functions as F


    pane, stats = F.col("kind") == "pane", F.col("kind") == "stats"
    hold = F.col("kind") == "hold"
    idle = [] if current.idle is None else [current.idle]
    found = aggregates.one_job(current.out.agg(
        F.count_if(pane & ~F.col("is_retraction")).alias("p"), F.count_if(pane & F.col("is_retraction")).alias("r"),
        F.min(F.when(pane, F.least("window_end", F.array_min(f"{REPLACES}.window_end")))).alias("end"),
        F.sum(F.when(stats, F.col("elements"))).alias("e"), F.sum(F.when(stats, F.col("dropped_elements"))).alias("d"),
        F.sum(F.when(stats, F.col("retractions"))).alias("r_in"),
        F.sum(F.when(stats, F.col("dropped_retractions"))).alias("r_dropped"),
        F.collect_list(F.when(hold, F.struct(*HOLD_FIELDS))).alias("h"),
    ), *idle)
    current.holds = [hold_span(h) for h in found["h"]]
    current.idle_holds = sorted(found.get("idle_holds") or [])
    return StageCounts(int(found["p"]), int(found["r"]), int(found["e"] or 0), int(found["d"] or 0), found["end"],
                       (int(found["r_in"] or 0), int(found["r_dropped"] or 0)))


def _next_arrivals(upstream: StageOutput, stage: StageSpec) -> "DataFrame":
    """The next stage's arrivals: the upstream's panes as elements, each at the sub-step and
    processing time it was emitted at."""
    from pyspark.sql import functions as F

    panes = upstream.out.where("kind = 'pane'").withColumnRenamed("sub", "seq").withColumn(
        "at_ms", F.col("emitted_at"))
    return elements_from_panes(panes, upstream.stage, stage, passthrough=("seq", "at_ms"))


def _spans(upstream: StageOutput, schedule: Schedule) -> list[HoldSpan]:
    """Hold spans of the upstream stage: from the keys it ran, plus, for the keys it did not
    run, the hold stored after their last batch, carried over (`runners.keyed.carried_hold_spans`;
    keys at the same hold give the same spans)."""
    spans = list(upstream.holds)
    for held in upstream.idle_holds:
        spans += carried_hold_spans(schedule, held)
    return spans
