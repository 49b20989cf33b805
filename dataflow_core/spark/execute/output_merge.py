"""What a window's panes net to (`WindowingStrategy.net_panes`) in Spark SQL: the last pane
in emission order (`pane_codec.EMISSION_ORDER`), and for discarding panes the combiner's
declared `output_merge` as an aggregate over the panes and of a stored total and a new one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.pane_codec import EMISSION_ORDER, REPLACES
from dataflow_core.model.strategy import WindowingStrategy, fold_merged_away

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_AGGREGATE = {"sum": "sum", "min": "min", "max": "max"}
_PAIR = {"sum": "{a} + {b}", "min": "least({a}, {b})", "max": "greatest({a}, {b})"}


def discarding_merge(strategy: WindowingStrategy) -> str | None:
    """The merge of a discarding strategy's pane outputs; None when panes accumulate, or when
    they are discarding panes whose outputs do not merge (a mean's): a window then stands at
    its latest pane (docs/model.md, "Discarding panes that do not merge")."""
    if strategy.accumulation is not AccumulationMode.DISCARDING:
        return None
    return strategy.combiner.output_merge if strategy.combiner.output_merge in _AGGREGATE else None


def merge_aggregate(merge: str, column: str) -> str:
    """SQL aggregating `column` over a window's panes."""
    return f"{_AGGREGATE[merge]}({column})"


def merge_pair(merge: str, a: str, b: str) -> str:
    """SQL merging two totals."""
    return _PAIR[merge].format(a=a, b=b)


def window_totals(
    panes: "DataFrame", strategy: WindowingStrategy, window_id: Sequence[str], value_type: str,
    ts: str = "ts",
) -> "DataFrame":
    """Per window (`window_id` columns) of `panes` (with the `EMISSION_ORDER` columns,
    `value` and the timestamp column `ts`), its last pane as `net_panes` nets it: discarding
    panes' values and timestamps merged, `value` cast to `value_type`. A window whose last
    pane `is_retraction` nets to nothing: the caller drops (or deletes) its row. So does a
    window a pane of its key declared merged away (`REPLACES`, `Pane.replaces`), in every
    accumulation mode: `current_panes`' rule (`with_merged_away`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    panes = with_merged_away(panes, window_id)
    last = Window.partitionBy(*window_id).orderBy(*[F.col(c).desc() for c in EMISSION_ORDER])
    ranked = panes.withColumn("_net_rank", F.row_number().over(last))
    merge = discarding_merge(strategy)
    if merge is not None:
        whole = Window.partitionBy(*window_id)
        total = F.expr(merge_aggregate(merge, "CASE WHEN NOT is_retraction THEN value END"))
        merged_ts = F.expr(f"{strategy.timestamp_combiner.merge}(CASE WHEN NOT is_retraction THEN {ts} END)")
        ranked = ranked.withColumn("value", total.over(whole)).withColumn(ts, merged_ts.over(whole))
        if strategy.folds_merged_away and strategy.window_fn.is_merging and REPLACES in panes.columns:
            absorbed = F.flatten(F.collect_list(F.when(~F.col("is_retraction"), F.col(REPLACES))).over(whole))
            ranked = ranked.withColumn(_ABSORBED, absorbed)
            return _folded(ranked.where("_net_rank = 1").drop("_net_rank"), strategy, window_id, ts) \
                .withColumn("value", F.col("value").cast(value_type))
    return ranked.where("_net_rank = 1").drop("_net_rank").withColumn("value", F.col("value").cast(value_type))


_ABSORBED = "_absorbed"
"""A window's row's list of the windows its panes declared merged away (`_folded`)."""


def _folded(totals: "DataFrame", strategy: WindowingStrategy, window_id: Sequence[str], ts: str) -> "DataFrame":
    """Per key in executors, each window's total folded with the totals of the windows it
    merged away, through earlier merges too (`strategy.fold_merged_away`, the rule of
    `current_panes`): a merged discarding window's panes hold only what its parts' panes
    did not, so its total is theirs and its own together. `totals` has one row per window,
    with `_ABSORBED`; that column goes."""
    from dataflow_core.spark.execute.by_key import map_keys

    keys, (start, end) = list(window_id[:-2]), window_id[-2:]
    columns = [c for c in totals.columns if c != _ABSORBED]
    schema = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in totals.schema.fields if f.name != _ABSORBED)

    def fold(own: dict, parts: list[dict]) -> dict:
        value, stamp = strategy.merge_totals([(own["value"], own[ts]), *((p["value"], p[ts]) for p in parts)])
        return {**own, "value": value, ts: stamp} if parts else own

    def one_key(_key: list, table, _side) -> list[dict]:
        rows = {(r[start], r[end]): r for r in table.to_pylist()}
        parts = {w: [(g["window_start"], g["window_end"]) for g in (r[_ABSORBED] or ())] for w, r in rows.items()}
        folded = fold_merged_away(rows, lambda w: parts[w], fold)
        return [{c: r[c] for c in columns} for r in folded.values()]

    return map_keys(totals, keys, one_key, schema)


MERGED_AWAY_INDEX = 2**31 - 1
"""The pane index of a merged-away window's end (`with_merged_away`): after every pane it
emitted, in emission order, even one emitted at the same moment as the pane that absorbed it."""


def with_merged_away(panes: "DataFrame", window_id: Sequence[str]) -> "DataFrame":
    """`panes` plus, for every window a pane declared merged away (`REPLACES`), a row that
    ends it: a retraction-like row (`is_retraction`, no value) at that pane's emission time,
    last in its window's emission order, so that the window nets to nothing whether its own
    panes are in `panes` (the results gate's pane log) or not (a micro-batch's results MERGE
    deletes the row an earlier batch wrote). Panes without the column come back as they are."""
    from pyspark.sql import functions as F

    if REPLACES not in panes.columns:
        return panes
    keys = list(window_id[:-2])
    declared = panes.where(F.col(REPLACES).isNotNull() & ~F.col("is_retraction")).select(
        *keys, "emitted_at", F.explode(REPLACES).alias("_gone"))
    ends = declared.select(
        *keys, F.col("_gone.window_start").alias(window_id[-2]), F.col("_gone.window_end").alias(window_id[-1]),
        "emitted_at", F.lit(MERGED_AWAY_INDEX).alias("pane_index"), F.lit(True).alias("is_retraction"))
    ends = ends.select(*[F.col(c).cast(panes.schema[c].dataType) for c in ends.columns])
    return panes.unionByName(ends, allowMissingColumns=True)


def touched_windows(panes: "DataFrame", window_id: Sequence[str]) -> "DataFrame":
    """The windows (`window_id` columns) `panes` are of, and those they declare merged away
    (`REPLACES`): every window whose results row those panes set or delete."""
    from pyspark.sql import functions as F

    own = panes.select(*window_id)
    if REPLACES not in panes.columns:
        return own.distinct()
    keys = list(window_id[:-2])
    gone = panes.where(F.col(REPLACES).isNotNull()).select(*keys, F.explode(REPLACES).alias("_gone")).select(
        *keys, F.col("_gone.window_start").alias(window_id[-2]), F.col("_gone.window_end").alias(window_id[-1]))
    return own.unionByName(gone).distinct()
