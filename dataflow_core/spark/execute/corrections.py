"""A batch backfill's corrections, run per key in executors by the model
(`model.corrections.correct`), never in SQL.

Input, per key: the changed windows (`CORRECTION_COLUMNS`: the recomputed value and
timestamp, or `present` false for a window that lost all its input, beside the standing
results row's pane as `s_*` fields), and, when micro-batches keep live state for the stage,
the key's elements (to rebuild the corrected windows' accumulators) and its stored state.
Output: the stage's output rows of kind `'pane'` (corrections and retractions, in order),
`'result'` (per window, the pane whose metadata its results row takes with the window's
total as value; `is_retraction` deletes the row) and, with live state, `'state'`.

Without live state, the windows the results do not have yet (a first backfill's, most of
any backfill's) skip the executors' Python: the model says once what `correct` emits for
such a window (`fresh_correction`), and Spark SQL copies it onto each of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from dataflow_core.model.corrections import Corrected, Correction, FreshCorrection, correct, fresh_correction
from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.pane_codec import pane_from_row, pane_metadata_row, pane_to_row, window_bounds, window_of
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import Instant
from dataflow_core.spark.execute.by_key import map_keys
from dataflow_core.spark.execute.keyed_stage import KeyCodec, key_fields, load_state, output_schema, state_row
from dataflow_core.spark.platform.cache import persist_uncompressed

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

STANDING = ("s_value", "s_ts", "s_timing", "s_pane_index", "s_on_time_index", "s_emitted_at")
CORRECTION_COLUMNS = ("window_start", "window_end", "present", "value", "ts", *STANDING)
"""Per changed window (times in ms): the recomputed pane (`present`, `value`, `ts`) and the
results' standing pane (`s_*`, null when the results have no row)."""


def run_corrections(
    fixes: "DataFrame",
    strategy: WindowingStrategy,
    codec: KeyCodec,
    value_type: str,
    at: Instant,
    watermark: Instant,
    elements: "DataFrame | None" = None,
    states: "DataFrame | None" = None,
    fresh_in_sql: bool = True,
    persisted: list["DataFrame"] | None = None,
    all_fresh: bool = False,
) -> "DataFrame":
    """The corrections' output rows (see the module docstring), lazily. `elements` (key
    columns, `value`, `event_ms`, optional `retraction`) and `states` (key columns,
    `state`) are given together, for a stage with live state. `fresh_in_sql=False` sends
    the windows the results do not have through the executors too (a test compares).
    `persisted`, for a caller that reads the output several times: the executors' part is
    persisted and added to it, for the caller to unpersist when done. `all_fresh`: the results
    have none of these windows (a first backfill), so no executor is started for the rest."""
    keys = list(codec.columns)
    schema = output_schema(key_fields(fixes, keys), value_type)
    inputs = _key_inputs(fixes, keys, elements)
    one_key = _corrector(strategy, codec, keys, at, watermark, live=states is not None)
    if states is not None:
        return map_keys(inputs, keys, one_key, schema, side=states.select(*keys, "state"))
    probe = fresh_correction(at, watermark) if fresh_in_sql else None
    if probe is None:
        return _kept(map_keys(inputs, keys, one_key, schema), persisted)
    return _fresh_in_sql(inputs, probe, keys, schema, one_key, persisted, all_fresh, strategy.window_fn.is_merging)


def _key_inputs(fixes: "DataFrame", keys: list[str], elements: "DataFrame | None") -> "DataFrame":
    """One frame for `map_keys`: the changed windows (`CORRECTION_COLUMNS`), and with live
    state the elements of the keys they belong to (`el_*`, `present` null), which rebuild
    the corrected windows' accumulators."""
    from pyspark.sql import functions as F

    both = fixes.select(*keys, *CORRECTION_COLUMNS)
    if elements is None:
        return both
    retraction = F.col("retraction") if "retraction" in elements.columns else F.lit(False)
    inputs = elements.join(fixes.select(*keys).distinct(), keys, "left_semi").select(
        *keys, F.col("value").alias("el_value"), "event_ms", retraction.alias("el_retraction"))
    return both.unionByName(inputs, allowMissingColumns=True)


def _corrector(
    strategy: WindowingStrategy, codec: KeyCodec, keys: list[str], at: Instant, watermark: Instant, live: bool,
) -> Callable[[list, "pa.Table", "pa.Table | None"], list[dict]]:
    """What an executor runs per key (shipped to it with these arguments): `correct` on the
    key's state (stored, with live state; else empty) and its changed windows."""

    def one_key(row_key: list, table: "pa.Table", state: "pa.Table | None") -> list[dict]:
        if not table.num_rows or table.column("present").null_count == table.num_rows:
            return []
        key = codec.key(row_key)
        text = state.column("state")[0].as_py() if state is not None and state.num_rows else None
        ks = load_state(key, strategy, text) if live else KeyedWindowSet(key, strategy)
        fixes, els = _fixes_and_elements(key, table)
        done = correct(ks, fixes, at, watermark, elements=els if live else None)
        keyed = dict(zip(keys, row_key))
        rows = _output_rows(keyed, done, at)
        if live:
            rows.append(state_row(keyed, ks, watermark))
        return rows

    return one_key


def _fixes_and_elements(key: object, table: "pa.Table") -> tuple[list[Correction], list[Element]]:
    """A key's rows of `_key_inputs` back apart: its changed windows and its elements."""
    fixes, els = [], []
    for r in table.to_pylist():
        if r["present"] is None:
            els.append(Element(r["el_value"], r["event_ms"], bool(r["el_retraction"])))
        else:
            fixes.append(_correction(key, r))
    return fixes, els


def _output_rows(keyed: dict, done: Corrected, at: Instant) -> list[dict]:
    """The key's `'pane'` rows in order, then a `'result'` row per window: the pane whose
    metadata the results row takes, with the window's total as value, or a deletion."""
    rows = [{**keyed, "kind": "pane", "ordinal": n, **pane_to_row(p)} for n, p in enumerate(done.panes)]
    for window, pane, total in done.results:
        if pane is None:
            start, end = window_bounds(window)
            rows.append({**keyed, "kind": "result", "window_start": start, "window_end": end,
                         "is_retraction": True, "emitted_at": at})
        else:
            rows.append({**keyed, "kind": "result", **pane_to_row(pane), "value": total})
    return rows


def _fresh_in_sql(
    inputs: "DataFrame", probe: FreshCorrection, keys: list[str], schema: str,
    one_key: Callable[[list, "pa.Table", "pa.Table | None"], list[dict]],
    persisted: list["DataFrame"] | None, all_fresh: bool, merging: bool = False,
) -> "DataFrame":
    """Without live state: the windows the results do not have get `probe`'s metadata in
    Spark SQL (`_fresh_rows`), the others go through the executors. With `merging` windows,
    a key with any other correction goes through the executors whole: its new window may
    have absorbed a standing one, which `correct` deletes and the new window's pane declares
    (`model.corrections.merged_into`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    fresh = F.col("present") & F.col("s_pane_index").isNull() & F.col("ts").isNotNull() \
        & F.col("window_start").isNotNull()
    if all_fresh:
        from pyspark.sql.types import _parse_datatype_string

        return _fresh_rows(inputs, probe, keys, _parse_datatype_string(schema))
    if merging:
        inputs = inputs.withColumn("_fresh", F.min(F.coalesce(fresh, F.lit(False)).cast("int"))
                                   .over(Window.partitionBy(*keys)) == 1)
        fresh = F.col("_fresh")
    rest = _kept(map_keys(inputs.where(~fresh).drop("_fresh"), keys, one_key, schema), persisted)
    return rest.unionByName(_fresh_rows(inputs.where(fresh).drop("_fresh"), probe, keys, rest.schema))


def _kept(rows: "DataFrame", persisted: list["DataFrame"] | None) -> "DataFrame":
    """The executors' output, persisted when the caller keeps a list of what to unpersist
    (the fresh windows' rows are a projection of the input: no need to keep them)."""
    if persisted is None:
        return rows
    persisted.append(persist_uncompressed(rows))
    return persisted[-1]


def _fresh_rows(fixes: "DataFrame", probe: FreshCorrection, keys: list[str], schema) -> "DataFrame":
    """Output rows (`schema`) for windows the results do not have: per window its pane
    and its results row, the model's metadata for the window's side of the watermark
    around its own value and timestamp."""
    from pyspark.sql import functions as F

    own = ("window_start", "window_end", "value", "ts")
    passed = F.col("window_end") <= F.lit(probe.watermark)
    early = pane_metadata_row(probe.early, probe.emitted_at) if probe.early is not None else None
    fields: dict[str, "object"] = {}
    for name, value in pane_metadata_row(probe.passed, probe.emitted_at).items():
        fields[name] = F.lit(value) if early is None else F.when(passed, F.lit(value)).otherwise(F.lit(early[name]))
    def of_kind(kind: str) -> "DataFrame":
        rows = fixes.select(*keys, *own, F.lit(kind).alias("kind"), F.lit(0).alias("ordinal"),
                            *[c.alias(n) for n, c in fields.items()])
        return rows.select(*[(F.col(f.name) if f.name in rows.columns else F.lit(None)).cast(f.dataType).alias(f.name)
                             for f in schema.fields])

    # two projections, not an explode: a reader of one kind (the pane log, the results) makes
    # only its own rows, since Spark drops the union's other side
    return of_kind("pane").unionByName(of_kind("result"))


def _correction(key: object, r: dict) -> Correction:
    standing = None
    if r["s_pane_index"] is not None:
        standing = pane_from_row(key, {
            "window_start": r["window_start"], "window_end": r["window_end"], "value": r["s_value"],
            "ts": r["s_ts"], "timing": r["s_timing"], "pane_index": r["s_pane_index"],
            "on_time_index": r["s_on_time_index"], "emitted_at": r["s_emitted_at"],
        })
    return Correction(
        window=window_of(r["window_start"], r["window_end"]),
        standing=standing,
        standing_total=r["s_value"],
        value=r["value"],
        timestamp=r["ts"],
        present=bool(r["present"]),
    )

