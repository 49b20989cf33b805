"""Per-key work in executors: a DataFrame's rows handed to Python one key at a time, many
keys per Arrow batch.

Spark's `groupBy().applyInArrow` (and `cogroup`) sends every key's rows as an Arrow stream
of its own and calls Python once per key for a table of its own: on a micro-batch's 2,000
keys that per-key traffic costs more than the model (benchmarks/results/spark-runner-history.md). Here the rows are
hash-partitioned on the key and sorted within partitions, the shuffle and sort a grouped
aggregation does, and `mapInArrow` walks each partition's batches, cutting them where the
key changes: a key's rows are one slice, whichever batches they came in. The output rows of
many keys go back as one batch.

A second DataFrame on the same keys (a key's stored state) rides along in the same shuffle,
marked and sorted after the key's own rows, and reaches the function as a table of its own:
what `cogroup` gives, without it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from dataflow_core.spark.platform.arrow import arrow_schema_of

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

KeyFn = Callable[[list, "pa.Table", "pa.Table | None"], list[dict]]
"""Called once per key: (the key's column values, its rows, its rows of the side DataFrame,
None without one) -> its output rows."""

SIDE = "_by_key_side"
"""Marks the side DataFrame's rows in the shuffled union."""

OUTPUT_ROWS = 10_000
"""Output rows gathered before they go back as one Arrow batch (Spark's own batch size)."""


def map_keys(
    df: "DataFrame",
    keys: Sequence[str],
    fn: KeyFn,
    schema: str,
    side: "DataFrame | None" = None,
) -> "DataFrame":
    """`fn` on every key of `df` (and of `side`, a DataFrame with the same key columns: a key
    only it has gets an empty table of `df`'s rows); its rows as a DataFrame of `schema`."""
    from pyspark.sql import functions as F

    keys = list(keys)
    main_columns = list(df.columns)
    side_columns = None if side is None else list(side.columns)
    rows = df
    if side is not None:
        rows = df.withColumn(SIDE, F.lit(False)).unionByName(
            side.withColumn(SIDE, F.lit(True)), allowMissingColumns=True)
    arrow_schema = arrow_schema_of(schema)

    def partition(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        out: list[dict] = []
        for group in _key_runs(batches, keys):
            out += _call(fn, group, keys, main_columns, side_columns)
            if len(out) >= OUTPUT_ROWS:
                yield from _batches(out, arrow_schema)
                out = []
        if out:
            yield from _batches(out, arrow_schema)

    order = keys if side is None else [*keys, SIDE]  # a key's side rows after its own
    return rows.repartition(*keys).sortWithinPartitions(*order).mapInArrow(partition, schema)


def _call(fn: KeyFn, group: "pa.Table", keys: list[str], main: list[str], side: list[str] | None) -> list[dict]:
    """`fn` on one key's rows; with a side DataFrame, its rows (sorted last) cut off as a table of their own."""
    row_key = [group.column(k)[0].as_py() for k in keys]
    if side is None:
        return fn(row_key, group, None)  # the rows are `df`'s own columns
    n_main = group.num_rows - sum(group.column(SIDE).to_pylist())  # sorted after the key's own rows
    return fn(row_key, group.slice(0, n_main).select(main), group.slice(n_main).select(side))


def _batches(rows: list[dict], schema: "pa.Schema") -> list["pa.RecordBatch"]:
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=schema).to_batches()


def _key_runs(batches: Iterator["pa.RecordBatch"], keys: list[str]) -> Iterator["pa.Table"]:
    """The rows of each key in turn, from batches sorted by key (a key's rows may span
    batches: the last run of a batch is held until the next batch shows where it ends)."""
    import pyarrow as pa

    held: list["pa.Table"] = []  # the current key's rows so far (slices of one or more batches)
    held_key: tuple | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        table = pa.Table.from_batches([batch])
        values = list(zip(*(table.column(k).to_pylist() for k in keys)))
        start = 0
        for i in range(1, len(values) + 1):
            if i < len(values) and _same(values[i], values[start]):
                continue
            run = table.slice(start, i - start)
            if held and not _same(values[start], held_key):
                yield _joined(held)
                held = []
            held.append(run)
            held_key = values[start]
            if i < len(values):  # a run that ends inside the batch is complete
                yield _joined(held)
                held = []
            start = i
    if held:
        yield _joined(held)


def _joined(parts: list["pa.Table"]) -> "pa.Table":
    import pyarrow as pa

    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def _same(a: tuple, b: tuple | None) -> bool:
    """Whether two rows' keys are one key as Spark groups them (NaN is one value)."""
    if b is None:
        return False
    return a == b or all(x == y or _nan(x) and _nan(y) for x, y in zip(a, b))


def _nan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)


__all__ = ["KeyFn", "map_keys"]
