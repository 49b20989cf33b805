"""Going live after backfills: the first micro-batch adopts the windows batch backfills (or
replays) emitted, per key in executors by the model (`model.corrections.take_over`), so live
input continues each window's pane history instead of starting a second one.

Input, per key: its standing panes (a results table's rows as panes, `STANDING_FIELDS`)
and, for accumulating stages, the elements those runs counted (to rebuild the windows'
accumulators). Output: the key's live state (key columns and `state`), which the batch then
runs like any stored state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataflow_core.model.corrections import take_over
from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.pane_codec import pane_from_row
from dataflow_core.model.state_codec import state_text
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import Instant
from dataflow_core.spark.execute.by_key import map_keys
from dataflow_core.spark.execute.keyed_stage import KeyCodec, key_fields

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

STANDING_FIELDS = ("window_start", "window_end", "value", "ts", "timing", "pane_index", "on_time_index", "emitted_at")


def taken_over_states(
    standing: "DataFrame",
    strategy: WindowingStrategy,
    codec: KeyCodec,
    watermark: Instant,
    elements: "DataFrame | None" = None,
) -> "DataFrame":
    """Per key of `standing`, its state after `take_over` at `watermark` (lazily).
    `elements` (key columns, `value`, `event_ms`, optional `retraction`) are the input the
    standing panes counted; only accumulating stages need them."""
    from pyspark.sql import functions as F

    keys = list(codec.columns)
    schema = f"{key_fields(standing, keys)}, state string"
    both = standing.select(*keys, *STANDING_FIELDS, F.lit(True).alias("_standing"))
    if elements is not None:
        retraction = F.col("retraction") if "retraction" in elements.columns else F.lit(False)
        counted = elements.join(standing.select(*keys).distinct(), keys, "left_semi").select(
            *keys, F.col("value").alias("el_value"), F.col("event_ms").alias("el_ms"),
            retraction.alias("_retraction"))
        both = both.unionByName(counted, allowMissingColumns=True)
    decode = codec.decode_value or (lambda v: v)

    def one_key(row_key: list, table: "pa.Table", _side: None) -> list[dict]:
        key = codec.key(row_key)
        panes, els = [], []
        for r in table.to_pylist():
            if r["_standing"] is not None:
                panes.append(pane_from_row(key, r))
            else:
                els.append(Element(decode(r["el_value"]), r["el_ms"], bool(r["_retraction"])))
        ks = KeyedWindowSet(key, strategy)
        take_over(ks, panes, watermark, elements=els)
        state = ks.to_state()
        if state is None:
            return []
        return [{**dict(zip(keys, row_key)), "state": state_text(state)}]

    return map_keys(both, keys, one_key, schema)
