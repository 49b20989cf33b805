"""`dataflow backfill` against the lean job a user would write by hand (issue 52), for
`bench_backfill.py` (figure 5).

The lean job: filter by the input rules, dedup by event id, hourly sums, one Delta write
(Spark SQL, nothing else: no quarantine, no pane log, no ledger). Two shapes of the same
hourly sum of watch seconds over the sample's two days:

- `ads_hourly`: per ad and hour, ad impressions only (billing's shape; few output rows);
- `viewers_hourly`: per viewer and hour, every view (many output rows).

Both sides are whole processes, run alternately. A side's marginal time is its process's
wall time less its Spark start (session plus a first query), which is what a bigger input
adds; the target is on the ratio of marginal times (at most 1.3x, goal 1.1x).
"""

from __future__ import annotations

SHAPES = {  # case -> (key column, where, what the output is per)
    "ads_hourly": ("ad_id", "ad_id IS NOT NULL", "per ad and hour (few output rows)"),
    "viewers_hourly": ("user_id", None, "per viewer and hour (many output rows)"),
}
GOAL, LIMIT = 1.1, 1.3


def register_billing_like(name: str, window: str, key: str = "user_id", where: str | None = None) -> None:
    """A pipeline of billing's shape under `name`: its rules, trigger and lateness, the sum
    of watch seconds per `key` in fixed windows of `window`, one stage."""
    from dataflow_core.model.accumulation import AccumulationMode
    from dataflow_core.model.combiners import SumFn
    from dataflow_core.model.strategy import WindowingStrategy
    from dataflow_core.model.time import parse_duration as d
    from dataflow_core.model.triggers import AfterCount, AfterWatermark, AlignedProcessingTime
    from dataflow_core.model.watermarks import HeuristicWatermark
    from dataflow_core.model.windows import FixedWindows
    from dataflow_core.pipelines import PipelineSpec, StageSpec, register

    register(PipelineSpec(
        name=name, input_table="video_events", where=where, key={key: key},
        value="CAST(watch_seconds AS DECIMAL(18,3))", quality_suite="video_events", partition_column="event_date",
        watermark=lambda: HeuristicWatermark(bound=d("2m")),
        stages=(StageSpec(name, WindowingStrategy(
            FixedWindows(d(window)), AfterWatermark(early=AlignedProcessingTime(d("10m")), late=AfterCount(1)),
            AccumulationMode.ACCUMULATING, d("1d"), SumFn()), (key,), "decimal(28,3)"),),
    ))  # fmt: skip


def register_lean_pipelines() -> None:
    """The two shapes as pipelines of billing's shape, hourly."""
    for case, (key, where, _) in SHAPES.items():
        register_billing_like(f"bench_{case}", "1h", key, where)


def lean_job(spark, case: str, source: str, target: str, start: str, end: str, valid: str) -> None:
    """The hand-written job: read, filter by the input rules, `dropDuplicates` on the event
    id, hourly sums, one Delta write."""
    key, where, _ = SHAPES[case]
    rows = spark.read.format("delta").load(source).where(
        f"event_date BETWEEN DATE'{start}' AND DATE'{end}' "
        f"AND event_time >= TIMESTAMP'{start}' AND event_time < TIMESTAMP'{end}' AND {valid} AND {where or 'TRUE'}"
    )
    rows.dropDuplicates(["event_id"]).createOrReplaceTempView("lean_events")
    spark.sql(f"""
        SELECT {key}, window.start AS window_start, window.end AS window_end,
               CAST(sum(CAST(watch_seconds AS DECIMAL(18,3))) AS DECIMAL(28,3)) AS value
        FROM lean_events GROUP BY {key}, window(event_time, '1 hour')
    """).write.format("delta").mode("overwrite").save(target)
