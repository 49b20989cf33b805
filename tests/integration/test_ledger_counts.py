"""A ledger that can fail: duplicates are counted by the dedup itself (`rows.elements`'
`DUPLICATES`), not derived as `read - quarantined - accepted`, so `Ledger.balanced` is a
check, not an identity: it holds on real runs, and it fails (and the job says so) when the
counts disagree."""

from __future__ import annotations

import datetime as dt
import itertools

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.triggers import AfterWatermark
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, register
from dataflow_core.spark.input.rows import DUPLICATES, EventRange, elements, in_range, tag_rows
from dataflow_core.spark.jobs.live_input import count_batch
from dataflow_core.spark.jobs.range_input import count_range
from dataflow_core.spark.sinks.runs import Ledger, RunResult

DAY0 = int(dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
M = 60_000
SCHEMA = "event_id string, ad_id string, v string, event_time timestamp, ingest_time timestamp"
_names = itertools.count()


def _spec() -> PipelineSpec:
    name = f"t_ledger_{next(_names)}"
    return register(PipelineSpec(
        name=name, input_table=f"{name}_in", key={"ad_id": "ad_id"}, value="try_cast(v AS BIGINT)",
        quality_suite=None, partition_column=None, watermark=lambda: HeuristicWatermark(bound=M),
        stages=(StageSpec(f"{name}_b", WindowingStrategy(
            FixedWindows(10 * M), AfterWatermark(), AccumulationMode.ACCUMULATING, 0, SumFn()), ("ad_id",), "bigint"),),
    ))


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


ROWS = [  # event id, ad, value, event ms, ingest ms
    ("a", "ad1", "1", DAY0 + M, DAY0 + M + 1000),
    ("a", "ad1", "1", DAY0 + M, DAY0 + M + 5000),  # second and third deliveries of a
    ("a", "ad1", "1", DAY0 + M, DAY0 + M + 9000),
    ("b", "ad1", "2", DAY0 + 2 * M, DAY0 + 2 * M + 1000),
    ("c", None, "3", DAY0 + 3 * M, DAY0 + 3 * M + 1000),  # quarantined: no key
    ("d", "ad2", "4", DAY0 + 25 * 3_600_000, DAY0 + 25 * 3_600_000),  # outside the range
]


def _range_frame(spark, spec: PipelineSpec, span: EventRange):
    rows = spark.createDataFrame([(e, a, v, _ts(t), _ts(i)) for e, a, v, t, i in ROWS], SCHEMA)
    return elements(spec, tag_rows(spark, spec, rows), within=in_range(spec, span))


def test_a_range_ledger_counts_duplicates_and_balances(spark):
    spec, span = _spec(), EventRange(DAY0, DAY0 + 24 * 3_600_000)
    ledger = Ledger()
    count_range(_range_frame(spark, spec, span), span, ledger)
    assert (ledger.read, ledger.accepted, ledger.duplicates, ledger.quarantined) == (5, 2, 2, 1)
    ledger.aggregated = ledger.accepted
    assert ledger.balanced


def test_a_range_ledger_whose_counts_disagree_does_not_balance_and_the_job_says_so(spark, capsys):
    """A frame whose dedup lost a delivery without counting it (as a broken dedup would):
    the derived formula balanced it anyway; the counted one does not."""
    from pyspark.sql import functions as F

    from dataflow_core.cli.backfill import _report

    spec, span = _spec(), EventRange(DAY0, DAY0 + 24 * 3_600_000)
    broken = _range_frame(spark, spec, span).withColumn(DUPLICATES, F.lit(0).cast("bigint"))
    ledger = Ledger()
    count_range(broken, span, ledger)
    ledger.aggregated = ledger.accepted
    assert (ledger.read, ledger.accepted, ledger.duplicates, ledger.quarantined) == (5, 2, 0, 1)
    assert not ledger.balanced
    assert "MISMATCH" in "\n".join(ledger.lines())
    assert _report(RunResult("run-x", ledger.as_dict(), 0)) == 1
    assert "LEDGER DOES NOT BALANCE" in capsys.readouterr().out


def test_a_batch_ledger_counts_both_kinds_of_duplicates():
    """A micro-batch's duplicates: deliveries its own dedup dropped, plus events counted before."""
    ledger = Ledger()
    count_batch({"read": 9, "bad": 1, "new": 4, "lost": 2, "seen": 2}, ledger)
    ledger.aggregated = ledger.accepted
    assert ledger.duplicates == 4 and ledger.balanced
    count_batch({"read": 9, "bad": 1, "new": 4, "lost": 0, "seen": 2}, ledger)
    assert not ledger.balanced
