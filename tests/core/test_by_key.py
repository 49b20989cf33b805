"""`execute.by_key._key_runs`: a partition's batches, sorted by key, cut into one table per
key, whichever batches a key's rows came in (pyarrow only; `map_keys` on Spark is run by
every Spark test of a stage)."""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.spark.execute.by_key import _key_runs


def _batches(keys: list, cuts: list[int]) -> list[pa.RecordBatch]:
    table = pa.table({"k": keys, "row": list(range(len(keys)))})
    bounds = sorted({0, len(keys), *[c % (len(keys) + 1) for c in cuts]})
    return [b for lo, hi in zip(bounds, bounds[1:]) for b in table.slice(lo, hi - lo).to_batches()]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=40), st.lists(st.integers(0, 40), max_size=8))
def test_each_key_is_one_table_of_all_its_rows_in_order(raw: list[int], cuts: list[int]) -> None:
    keys = sorted(raw)
    runs = list(_key_runs(iter(_batches(keys, cuts)), ["k"]))
    assert [r.column("k")[0].as_py() for r in runs] == sorted(set(keys))
    assert all(len(set(r.column("k").to_pylist())) == 1 for r in runs)
    assert [i for r in runs for i in r.column("row").to_pylist()] == list(range(len(keys)))


def test_null_and_nan_keys_are_one_key_each_as_spark_groups_them() -> None:
    keys = [None, None, float("nan"), float("nan"), 1.0]
    runs = list(_key_runs(iter(_batches(keys, [1, 3])), ["k"]))
    assert [r.num_rows for r in runs] == [2, 2, 1]
    assert runs[0].column("k")[0].as_py() is None and math.isnan(runs[1].column("k")[0].as_py())


def test_keys_of_two_columns_change_where_either_changes() -> None:
    table = pa.table({"a": ["x", "x", "x", "y"], "b": [1, 1, 2, 2]})
    runs = list(_key_runs(iter(table.to_batches(max_chunksize=1)), ["a", "b"]))
    assert [r.to_pylist() for r in runs] == [
        [{"a": "x", "b": 1}, {"a": "x", "b": 1}], [{"a": "x", "b": 2}], [{"a": "y", "b": 2}]]


def test_no_batches_or_empty_ones_give_no_keys() -> None:
    empty = pa.table({"k": pa.array([], pa.int64())}).to_batches()
    assert list(_key_runs(iter([]), ["k"])) == []
    assert list(_key_runs(iter(empty), ["k"])) == []
