"""Watermark estimators: each one's rule, that none ever moves back or past processing time
plus the skew, what each observes and which the Spark runners feed (refused at registration
otherwise), and that the Spark runners' per-batch summaries give the reference's watermarks."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

import math
import re

import pytest

from dataflow_core.errors import DataflowError
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, format_instant, format_watermark, parse_instant
from dataflow_core.model.triggers import AfterWatermark
from dataflow_core.model.watermarks import (
    SPARK_BOUNDED,
    SPARK_LIVE,
    BatchSummary,
    HeuristicWatermark,
    Observation,
    PercentileWatermark,
    PerfectWatermark,
    Progress,
    SourceProgressWatermark,
    WatermarkEstimator,
    pending_after,
    spark_refusal,
    summarize,
)
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines.spec import PipelineSpec, StageSpec
from dataflow_core.runners.reference import reference_watermarks
from dataflow_core.spark.jobs.observe import refuse_live


def test_perfect_is_least_pending_then_end_of_time_when_bounded():
    wm = PerfectWatermark()
    assert wm.update(Progress(pending_event_times=[50, 20, 90])) == 20
    assert wm.update(Progress(pending_event_times=[90])) == 90
    assert wm.update(Progress(pending_event_times=[], bounded=True)) == END_OF_TIME


def test_perfect_with_arrival_time_follows_processing_time():
    wm = PerfectWatermark(use_arrival_time=True)
    assert wm.update(Progress(processing_time=1_000)) == 1_000
    assert wm.update(Progress(processing_time=5_000)) == 5_000


def test_heuristic_trails_largest_event_time_by_bound():
    wm = HeuristicWatermark(bound=100)
    assert wm.update(Progress(batch_event_times=[1_000, 400])) == 900
    # a batch of older data does not pull it back
    assert wm.update(Progress(batch_event_times=[10])) == 900
    assert wm.update(Progress(batch_event_times=[2_000])) == 1_900


def test_percentile_of_the_batch_ignores_stragglers():
    batch = [5] + list(range(1_000, 1_099))  # one straggler at 5 among the 100 the batch delivered
    assert PerfectWatermark().update(Progress(pending_event_times=batch)) == 5
    assert PercentileWatermark(quantile=0.01).update(Progress(batch_event_times=batch)) == 5
    assert PercentileWatermark(quantile=0.02).update(Progress(batch_event_times=batch)) == 1_000
    assert PercentileWatermark(quantile=0.5).update(Progress(batch_event_times=batch)) == 1_048


def test_percentile_stays_on_an_empty_batch_and_ends_with_complete_input():
    wm = PercentileWatermark(quantile=0.5)
    assert wm.update(Progress(batch_event_times=[10, 20, 30])) == 20
    assert wm.update(Progress(batch_event_times=[])) == 20
    assert wm.update(Progress(batch_event_times=[1, 2, 3])) == 20  # a batch of older data: never back
    assert wm.update(Progress(bounded=True)) == END_OF_TIME


def test_a_summary_is_read_as_every_time_would_be():
    times = [40, 10, 30, 20]
    for estimator in (HeuristicWatermark(5), PercentileWatermark(0.25), PercentileWatermark(1)):
        fed_all = type(estimator)(**{k: v for k, v in vars(estimator).items() if k in ("bound", "quantile")})
        summary = summarize(times, estimator.quantiles)
        assert estimator.update(Progress(batch_summary=summary)) == fed_all.update(Progress(batch_event_times=times))
    assert summarize([], (0.5,)) == BatchSummary()
    assert summarize([7, 3, 5], (0, 0.5, 1)) == BatchSummary(7, {0: 3, 0.5: 5, 1: 7})


def test_source_progress_is_least_unread_partition():
    wm = SourceProgressWatermark()
    assert wm.update(Progress(partitions={"f1": 100, "f2": 40, "f3": None})) == 40
    assert wm.update(Progress(partitions={"f1": 120, "f2": None, "f3": None})) == 120
    assert wm.update(Progress(partitions={"f1": None}, bounded=True)) == END_OF_TIME


observations = st.lists(
    st.builds(
        Progress,
        batch_event_times=st.lists(st.integers(0, 10_000), max_size=5),
        pending_event_times=st.lists(st.integers(0, 10_000), max_size=5),
        partitions=st.dictionaries(st.sampled_from("abc"), st.none() | st.integers(0, 10_000), max_size=3),
        processing_time=st.integers(0, 10_000),
    ),
    max_size=20,
)


@given(observations)
def test_no_estimator_moves_back(batches):
    for estimator in (PerfectWatermark(), PerfectWatermark(use_arrival_time=True), HeuristicWatermark(50),
                      PercentileWatermark(0.1), SourceProgressWatermark()):
        seen = []
        for progress in batches:
            seen.append(estimator.update(progress))
        assert seen == sorted(seen), type(estimator).__name__


# --- what each estimator observes, and which runner feeds it --------------------------------


def test_every_estimator_declares_what_it_observes():
    assert HeuristicWatermark(10).observes == {Observation.MAX_EVENT_TIME}
    assert PercentileWatermark(0.1).observes == {Observation.EVENT_TIME_QUANTILES}
    assert PercentileWatermark(0.1).quantiles == (0.1,)
    assert PerfectWatermark().observes == {Observation.PENDING}
    assert PerfectWatermark(use_arrival_time=True).observes == {Observation.PROCESSING_TIME}
    assert Observation.PARTITIONS in SourceProgressWatermark().observes
    assert Observation.PENDING not in SPARK_LIVE and Observation.PENDING in SPARK_BOUNDED
    assert Observation.PARTITIONS not in SPARK_BOUNDED
    for fed_live in (HeuristicWatermark(10), PercentileWatermark(0.1), PerfectWatermark(use_arrival_time=True)):
        assert spark_refusal(fed_live, SPARK_LIVE) is None
    assert spark_refusal(PerfectWatermark()) is None  # a replay feeds it
    assert "PerfectWatermark" in spark_refusal(PerfectWatermark(), SPARK_LIVE)


class _Undeclared(WatermarkEstimator):
    def estimate(self, progress):
        return progress.processing_time


class _Ahead(_Undeclared):
    def estimate(self, progress):
        return progress.processing_time + 10 * HOUR


def _spec(watermark, name="t_wm") -> PipelineSpec:
    stage = StageSpec(f"{name}_out", WindowingStrategy(FixedWindows(60_000), AfterWatermark(),
                                                       AccumulationMode.DISCARDING, 0, SumFn()), value_type=int)
    return PipelineSpec(name=name, input_table="t_in", key="k", value="v", stages=(stage,), watermark=watermark)


@pytest.mark.parametrize("estimator, named", [
    (SourceProgressWatermark(), "SourceProgressWatermark"), (_Undeclared(), "_Undeclared"),
])
def test_an_estimator_no_spark_runner_feeds_is_refused_when_the_pipeline_is_registered(estimator, named):
    with pytest.raises(DataflowError) as err:
        _spec(lambda: estimator)
    message = str(err.value)
    assert "\n" not in message and named in message and "'t_wm'" in message
    assert "use HeuristicWatermark(bound=...) or PercentileWatermark(quantile=...)" in message


def test_an_estimator_only_a_replay_feeds_is_registered_and_refused_live_in_one_line():
    spec = _spec(PerfectWatermark())  # registered: `dataflow backfill --replay` feeds it
    with pytest.raises(DataflowError) as err:
        refuse_live(spec.name, spec.watermark())
    message = str(err.value)
    assert "\n" not in message and "PerfectWatermark" in message and "least event time not yet processed" in message
    assert "--replay" in message
    for fed in (HeuristicWatermark(10), PercentileWatermark(0.1), PerfectWatermark(use_arrival_time=True)):
        refuse_live("t_wm", _spec(fed).watermark())  # no error


# --- the cap: never past processing time plus the skew ----------------------------------------

HOUR = 3_600_000
NOW = parse_instant("2024-05-01T12:00:00Z")
Y2099 = parse_instant("2099-01-01T00:00:00Z")


def test_a_row_stamped_2099_moves_no_estimator_past_processing_time_plus_the_skew():
    for estimator in (HeuristicWatermark(0), PercentileWatermark(1.0), SourceProgressWatermark()):
        wm = estimator.update(Progress(batch_event_times=[NOW - 5, Y2099], processing_time=NOW, max_skew=HOUR))
        assert wm == NOW + HOUR, type(estimator).__name__
    assert PerfectWatermark().update(Progress(pending_event_times=[Y2099], bounded=True, processing_time=NOW,
                                              max_skew=HOUR)) == NOW + HOUR
    assert _Ahead().update(Progress(processing_time=NOW, max_skew=HOUR)) == NOW + HOUR  # a guess of its own
    summary = BatchSummary(Y2099, {0.5: Y2099})
    assert PercentileWatermark(0.5).update(Progress(batch_summary=summary, processing_time=NOW, max_skew=HOUR)) \
        == NOW + HOUR


def test_the_heuristic_remembers_the_capped_time_not_2099():
    wm = HeuristicWatermark(bound=60_000)
    wm.update(Progress(batch_event_times=[Y2099], processing_time=NOW, max_skew=HOUR))
    assert wm.max_seen == NOW + HOUR
    later = NOW + 2 * HOUR  # real event time catches up with the capped memory, and moves it on
    assert wm.update(Progress(batch_event_times=[later], processing_time=later, max_skew=HOUR)) == later - 60_000


def test_complete_input_still_ends_the_watermark_and_no_cap_without_a_skew():
    done = Progress(bounded=True, processing_time=NOW, max_skew=HOUR)
    assert PerfectWatermark().update(done) == END_OF_TIME
    assert HeuristicWatermark(10).update(done) == END_OF_TIME
    assert HeuristicWatermark(0).update(Progress(batch_event_times=[Y2099], processing_time=NOW)) == Y2099


# --- the Spark runners' feeding equals the reference's ------------------------------------------


def spark_summary(times: list[int], quantiles) -> BatchSummary:
    """The summary as `spark.jobs.observe.summary_columns` computes it, step by step: max;
    `element_at(array_sort(collect_list(t)), int(least(n, greatest(1, ceil(q * n)))))`
    (1-based, the double product of the literal q and the bigint count)."""
    if not times:
        return BatchSummary()
    ordered, n = sorted(times), len(times)
    return BatchSummary(max(times), {q: ordered[int(min(n, max(1, math.ceil(float(q) * float(n))))) - 1]
                                     for q in quantiles})


batchings = st.lists(  # per batch: its processing-time step and the event times it delivered
    st.tuples(st.integers(0, 3 * HOUR), st.lists(st.integers(-HOUR, 3 * HOUR) | st.just(Y2099), max_size=12)),
    min_size=1, max_size=8,
)
estimators = st.one_of(
    st.builds(HeuristicWatermark, st.integers(0, HOUR)),
    st.builds(PercentileWatermark, st.sampled_from([0, 0.01, 0.07, 0.1, 0.25, 0.5, 0.9, 1]) | st.floats(0, 1)),
    st.builds(PerfectWatermark, use_arrival_time=st.booleans()),
)


@settings(max_examples=300, deadline=None)  # a shared machine: no per-example deadline
@given(batchings, estimators, st.sampled_from([None, 0, HOUR]), st.booleans())
@example([(0, [1, 2, 3])], PercentileWatermark(0.5), None, False)  # rank 2 of 3
@example([(0, list(range(100)))], PercentileWatermark(0.07), HOUR, False)  # 0.07 * 100 is 7.000000000000001
@example([(0, [5, 9]), (HOUR, []), (HOUR, [1])], PerfectWatermark(), HOUR, True)  # pending, then complete
@example([(0, [Y2099]), (HOUR, [HOUR])], HeuristicWatermark(0), 0, False)  # capped
def test_the_spark_runners_summaries_give_the_reference_watermarks(drawn, estimator, skew, replay):
    """Random batchings: the reference (every event time; every later time pending in a
    replay) and the Spark runners' feeding (the per-batch summary; a replay's pending from
    each batch's least time, `pending_after`) move the watermark alike, cap included."""
    import copy

    batches, at = [], NOW
    for step, times in drawn:
        at += step
        batches.append((at, [NOW + t if t != Y2099 else t for t in times]))
    bounded = replay and Observation.PENDING in estimator.observes
    spark_fed = copy.deepcopy(estimator)
    want = reference_watermarks(estimator, batches, skew, bounded=bounded)
    pending = pending_after({n: min(ts) for n, (_, ts) in enumerate(batches) if ts}, len(batches) - 1)
    got = [spark_fed.update(Progress(
        batch_summary=spark_summary(times, spark_fed.quantiles), processing_time=at, max_skew=skew,
        pending_event_times=pending[n] if bounded else (), bounded=bounded)) for n, (at, times) in enumerate(batches)]
    assert got == want


# --- formatting any instant -------------------------------------------------------------------


def test_instants_from_year_10000_on_and_before_year_1_are_formatted():
    assert format_instant(parse_instant("9999-12-31T23:59:59.999Z")) == "9999-12-31T23:59:59.999Z"
    assert format_instant(parse_instant("9999-12-31T23:59:59.999Z") + 1) == "+10000-01-01T00:00:00.000Z"
    assert format_instant(parse_instant("0001-01-01T00:00:00Z") - 1) == "0000-12-31T23:59:59.999Z"
    assert re.fullmatch(r"\+146140482-\d\d-\d\dT[\d:.]+Z", format_instant(END_OF_TIME))
    assert format_instant(-END_OF_TIME).startswith("-146136543-")
    assert format_watermark(END_OF_TIME - 1).startswith("+146140482-")


@settings(deadline=None)
@given(st.integers(-(2**62), 2**62))
def test_any_instant_formats_and_four_hundred_years_later_only_the_year_moves(t):
    cycle = 146_097 * 86_400_000
    a, b = format_instant(t), format_instant(t + cycle)
    year_a, rest_a = re.fullmatch(r"([+-]?\d+)(-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)", a).groups()
    year_b, rest_b = re.fullmatch(r"([+-]?\d+)(-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)", b).groups()
    assert rest_a == rest_b and int(year_b) == int(year_a) + 400
    if -62135596800000 <= t <= 253402300799999:  # within datetime's years: what ISO-8601 parsing reads back
        assert parse_instant(a) == t
