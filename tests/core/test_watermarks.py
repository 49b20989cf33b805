"""Watermark estimators: each one's rule, and that none ever moves back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.watermarks import (
    HeuristicWatermark,
    PercentileWatermark,
    PerfectWatermark,
    Progress,
    SourceProgressWatermark,
)


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


def test_percentile_ignores_stragglers():
    pending = [5] + list(range(1_000, 1_099))  # one straggler at 5 among 100 pending
    assert PerfectWatermark().update(Progress(pending_event_times=pending)) == 5
    assert PercentileWatermark(quantile=0.01).update(Progress(pending_event_times=pending)) == 5
    assert PercentileWatermark(quantile=0.02).update(Progress(pending_event_times=pending)) == 1_000
    assert PercentileWatermark(quantile=0.5).update(Progress(pending_event_times=pending)) == 1_048


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
