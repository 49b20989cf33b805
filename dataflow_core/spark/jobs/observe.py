"""What the Spark runners observe of a batch for its watermark estimator
(`model.watermarks.SPARK_LIVE`, `SPARK_BOUNDED`): the batch's event times summarized by one
aggregation in the executors (`model.watermarks.BatchSummary`; no row reaches the driver),
and, in a replay, what is still to replay.

The quantile is the model's nearest rank (`model.watermarks.quantile_rank`): the value at
1-based position ceil(q * n) of the batch's sorted event times, computed here by the same
double arithmetic, over an array the final aggregation task builds (memory of the order of
the batch's rows in one executor task, as any exact quantile needs). It is computed only for
an estimator that asks for quantiles (`WatermarkEstimator.quantiles`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.model.watermarks import SPARK_LIVE, BatchSummary, WatermarkEstimator, spark_refusal

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row

GREATEST = "_wm_greatest"


def _quantile_name(n: int) -> str:
    return f"_wm_q{n}"


def summary_columns(estimator: WatermarkEstimator, event_ms: str = "event_ms") -> list["Column"]:
    """The aggregate columns of a batch's summary for `estimator`: its greatest event time
    and the nearest-rank quantile of each fraction it asks for (one shared sorted array)."""
    from pyspark.sql import functions as F

    times = F.col(event_ms)
    n = F.count(times)
    ordered = F.array_sort(F.collect_list(times))
    cols = [F.max(times).alias(GREATEST)]
    for i, q in enumerate(estimator.quantiles):
        rank = F.least(n, F.greatest(F.lit(1).cast("bigint"), F.ceil(F.lit(float(q)) * n)))
        # null over no rows (a batch of duplicates only): element_at(.., 0) is an error
        cols.append(F.when(n > 0, F.element_at(ordered, rank.cast("int"))).alias(_quantile_name(i)))
    return cols


def summary_of(row: "Row | dict | None", estimator: WatermarkEstimator) -> BatchSummary:
    """The `BatchSummary` in a row of `summary_columns` (None, or a null greatest: an empty batch)."""
    if row is None or row[GREATEST] is None:
        return BatchSummary()
    return BatchSummary(int(row[GREATEST]), {q: int(row[_quantile_name(i)]) for i, q in enumerate(estimator.quantiles)})


def live_summary(estimator: WatermarkEstimator, arrived: tuple, elements: "DataFrame | None") -> BatchSummary:
    """A micro-batch's summary: the greatest event time of the valid rows that arrived
    (duplicates included, `live_input.Accepted.arrived`, no job of its own) and, for an
    estimator asking for quantiles, those of the batch's accepted elements (first deliveries,
    as a replay's batches hold them), one aggregation over the cached elements."""
    if not arrived:
        return BatchSummary()
    if not estimator.quantiles or elements is None:
        return BatchSummary(int(arrived[1]))
    row = elements.agg(*summary_columns(estimator)).first()
    # every row a duplicate: no element, no quantile (the estimator keeps its watermark)
    return BatchSummary(int(arrived[1]), summary_of(row, estimator).quantiles)


def refuse_live(name: str, estimator: WatermarkEstimator) -> None:
    """A live micro-batch cannot feed what only a bounded replay observes (PENDING): refused
    in one line before the batch is claimed."""
    refusal = spark_refusal(estimator, SPARK_LIVE, "a live micro-batch (unbounded input)")
    if refusal is not None:
        raise DataflowError(f"pipeline {name!r}: {refusal}, or run its input as `dataflow backfill --replay`")
