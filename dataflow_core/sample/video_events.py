"""Sample input for the paper's motivating case: a video platform's content and ad views.

Every value is derived from xxhash64(seed, row id, field name) on `spark.range(rows)`, so the
same seed and size give identical rows however Spark partitions the work, and 10 million rows
are plain column expressions (no Python UDFs).

The disorder model (see docs/data.md): most rows arrive within seconds, some minutes late,
a few hours late (offline mobile viewers), a share are re-deliveries of the previous row's
event, and a share carry one defect the quality rules must catch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from dataflow_core.sample.config import SampleConfig

if TYPE_CHECKING:
    from collections.abc import Mapping

# Devices and their shares of views. Late-by-hours rows are always mobile.
DEVICE_SHARES: tuple[tuple[str, float], ...] = (
    ("ios", 0.30),
    ("android", 0.35),
    ("web", 0.20),
    ("tv", 0.15),
)
DEVICES: tuple[str, ...] = tuple(name for name, _ in DEVICE_SHARES)
MOBILE_DEVICES: tuple[str, ...] = ("ios", "android")

# How the raw event time text looks: ISO-8601 in UTC with milliseconds.
EVENT_TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSX"

# Row kinds, reported by the generator's summary (not stored in the table).
ON_TIME, LATE_MINUTES, LATE_HOURS, DUPLICATE, MALFORMED = (
    "on_time", "late_minutes", "late_hours", "duplicate", "malformed",
)
KINDS: tuple[str, ...] = (ON_TIME, LATE_MINUTES, LATE_HOURS, DUPLICATE, MALFORMED)

# The one defect a malformed row carries.
DEFECTS: tuple[str, ...] = (
    "null_user_id",
    "null_video_id",
    "unparseable_event_time",
    "future_event_time",
    "negative_watch_seconds",
    "unknown_device",
)
UNPARSEABLE_TIMES: tuple[str, ...] = ("", "not-a-time", "yesterday evening", "NaN", "??:??")
UNKNOWN_DEVICE = "smart-fridge"
FUTURE_OFFSET_MILLIS = 3650 * 86_400_000  # ten years ahead of the true event time

# Columns of the input table, in order. `event_time_raw` is the text the client sent;
# `event_time` is its parse (null when unparseable); `event_date` is the UTC date of
# event_time (of ingest_time when event_time is null) and partitions the table.
COLUMNS: tuple[str, ...] = (
    "event_id",
    "user_id",
    "video_id",
    "ad_id",
    "event_time_raw",
    "event_time",
    "ingest_time",
    "watch_seconds",
    "device",
    "event_date",
)
PARTITION_COLUMN = "event_date"
KIND_COLUMN = "sample_kind"
DEFECT_COLUMN = "sample_defect"

_MASK_53 = (1 << 53) - 1
_DAY_MILLIS = 86_400_000


def generate_events(
    spark: SparkSession, config: SampleConfig, labels: bool = False, partitions: int | None = None
) -> DataFrame:
    """The sample as a DataFrame (nothing is computed until an action runs).

    `partitions` splits the row ids into that many Spark partitions (default: the
    session's parallelism); the rows are the same whatever it is.

    With `labels=True` two extra columns say what the generator made of each row
    (`sample_kind`, `sample_defect`): the ground truth tests and the summary use.

    Built in steps, each adding columns the next reads: which event a row carries and what
    kind of row it is, the draws used more than once, the two times, then the table's columns.
    """
    g = _Hashes(config.seed)
    df = _with_source_and_kind(spark.range(0, config.rows, 1, partitions), g, config)
    df = _with_shared_draws(df, g, config)
    df = _with_times(df, g)
    df = df.select("_dup", "_kind", "_defect", *_table_columns(g, config))
    out: list[Column | str] = list(COLUMNS)
    if labels:
        out += [
            F.when(F.col("_dup"), F.lit(DUPLICATE)).otherwise(F.col("_kind")).alias(KIND_COLUMN),
            F.col("_defect").alias(DEFECT_COLUMN),
        ]
    return df.select(*out)


def _base_kind(g: _Hashes, config: SampleConfig, row: Column) -> Column:
    """The kind a row would have if it were not a duplicate."""
    m = config.malformed_share
    u = g.uniform(row, "kind")
    return (
        F.when(u < m, F.lit(MALFORMED))
        .when(u < m + config.late_hours_share, F.lit(LATE_HOURS))
        .when(u < m + config.late_hours_share + config.late_minutes_share, F.lit(LATE_MINUTES))
        .otherwise(F.lit(ON_TIME))
    )


def _with_source_and_kind(ids: DataFrame, g: _Hashes, config: SampleConfig) -> DataFrame:
    """`_dup` (a re-delivery), `_src` (the row whose event this row carries: itself, or the
    previous row for a re-delivery), `_kind` and `_defect` of that event. A duplicate never
    copies a copy or a malformed row, so that `duplicate_share` is what `config` says."""

    def candidate(row: Column) -> Column:
        return g.uniform(row, "duplicate") < config.duplicate_candidate_share

    row_id = F.col("id")
    previous = row_id - 1
    is_duplicate = (
        (row_id > 0) & candidate(row_id) & ~candidate(previous)
        & (_base_kind(g, config, previous) != F.lit(MALFORMED))
    )
    df = ids.withColumn("_dup", is_duplicate).withColumn("_src", F.when(F.col("_dup"), previous).otherwise(row_id))
    src = F.col("_src")
    df = df.withColumn("_kind", _base_kind(g, config, src))
    return df.withColumn("_defect", F.when(F.col("_kind") == MALFORMED, g.pick(src, "defect", DEFECTS)))


def _with_shared_draws(df: DataFrame, g: _Hashes, config: SampleConfig) -> DataFrame:
    """The draws used more than once (`_is_ad`, `_u_watch`, `_event_ms`, `_u_delay`), each in
    its own column: Spark keeps such projections apart instead of inlining (and re-hashing)
    them into every use."""
    src = F.col("_src")
    return df.select(
        "*",
        (g.uniform(src, "is_ad") < config.ad_share).alias("_is_ad"),
        g.uniform(src, "watch").alias("_u_watch"),
        (F.lit(config.start_millis) + F.floor(g.uniform(src, "event_time") * config.span_millis))
        .alias("_event_ms"),
        g.uniform(src, "delay").alias("_u_delay"),
    )


def _with_times(df: DataFrame, g: _Hashes) -> DataFrame:
    """`_ingest_ms` (event time plus the kind's delay, plus the re-delivery's own delay) and
    `_reported_ms` (what the client says: null when its text will not parse, ten years ahead
    for a future time). Epoch milliseconds: exact integers, no session time zone involved."""
    kind, u_delay, event_ms = F.col("_kind"), F.col("_u_delay"), F.col("_event_ms")
    defect = F.col("_defect")
    delay_ms = (
        F.when(kind == LATE_MINUTES, 60_000 + F.floor(u_delay * 29 * 60_000))
        .when(kind == LATE_HOURS, 3_600_000 + F.floor(u_delay * 11 * 3_600_000))
        .otherwise(50 + F.floor(u_delay * u_delay * 10_000))
    )
    redelivery_ms = 1_000 + F.floor(g.uniform(F.col("id"), "redelivery") * 10 * 60_000)
    return df.select(
        "*",
        (event_ms + delay_ms + F.when(F.col("_dup"), redelivery_ms).otherwise(F.lit(0)))
        .alias("_ingest_ms"),
        F.when(defect == "unparseable_event_time", F.lit(None).cast("long"))
        .when(defect == "future_event_time", event_ms + FUTURE_OFFSET_MILLIS)
        .otherwise(event_ms)
        .alias("_reported_ms"),
    )


def _table_columns(g: _Hashes, config: SampleConfig) -> list[Column]:
    """The input table's columns (`COLUMNS`, in order) from the columns built before, each
    defect applied to the one column it breaks."""
    src = F.col("_src")
    reported_ms, ingest_ms = F.col("_reported_ms"), F.col("_ingest_ms")
    return [
        _event_id(g, src).alias("event_id"),
        *_ids(g, config),
        F.when(reported_ms.isNull(), g.pick(src, "bad_time", UNPARSEABLE_TIMES))
        .otherwise(_iso_text(reported_ms))
        .alias("event_time_raw"),
        # What parse_event_time(event_time_raw) gives, computed from the same milliseconds
        # (parsing 10 million strings would double the generator's run time).
        F.timestamp_millis(reported_ms).alias("event_time"),
        F.timestamp_millis(ingest_ms).alias("ingest_time"),
        _watch_seconds(),
        _device(g),
        _utc_date_of_millis(F.coalesce(reported_ms, ingest_ms)).alias("event_date"),
    ]


def _ids(g: _Hashes, config: SampleConfig) -> list[Column]:
    """`user_id`, `video_id` (skewed: a few videos get most views) and `ad_id` (ads only)."""
    src, defect, no_text = F.col("_src"), F.col("_defect"), F.lit(None).cast("string")
    video_rank = F.floor(F.pow(g.uniform(src, "video"), 2) * config.video_count)
    user = F.floor(g.uniform(src, "user") * config.user_count).cast("string")
    ad = F.floor(g.uniform(src, "ad") * config.ads).cast("string")
    return [
        F.when(defect == "null_user_id", no_text).otherwise(F.concat(F.lit("user-"), user))
        .alias("user_id"),
        F.when(defect == "null_video_id", no_text)
        .otherwise(F.concat(F.lit("video-"), video_rank.cast("string")))
        .alias("video_id"),
        F.when(F.col("_is_ad"), F.concat(F.lit("ad-"), ad)).otherwise(no_text).alias("ad_id"),
    ]


def _watch_seconds() -> Column:
    """Content views: exponential, mean 4 minutes, capped at 3 hours; ads 5 to 30 s."""
    u_watch = F.col("_u_watch")
    content_watch = F.least(-F.log1p(-u_watch) * 240.0, F.lit(3.0 * 3600))
    ad_watch = 5.0 + u_watch * 25.0
    watch = F.round(F.when(F.col("_is_ad"), ad_watch).otherwise(content_watch), 1)
    return F.when(F.col("_defect") == "negative_watch_seconds", -watch).otherwise(watch).alias("watch_seconds")


def _device(g: _Hashes) -> Column:
    """By `DEVICE_SHARES`; rows hours late are mobile (offline viewers)."""
    src = F.col("_src")
    device = F.when(F.col("_kind") == LATE_HOURS, g.weighted(src, "device", _mobile_shares())).otherwise(
        g.weighted(src, "device", DEVICE_SHARES)
    )
    return F.when(F.col("_defect") == "unknown_device", F.lit(UNKNOWN_DEVICE)).otherwise(device).alias("device")


def parse_event_time(raw: Column) -> Column:
    """The event time text as a timestamp; null (never an error) when it does not parse."""
    return F.try_to_timestamp(raw, F.lit(EVENT_TIME_FORMAT))


def utc_date(ts: Column) -> Column:
    """The UTC calendar date of a timestamp, whatever the session time zone."""
    return _utc_date_of_millis(F.unix_millis(ts))


def _utc_date_of_millis(ms: Column) -> Column:
    return F.date_from_unix_date(F.floor(ms / _DAY_MILLIS).cast("int"))


def count_by_kind(spark: SparkSession, config: SampleConfig) -> dict[str, int]:
    """Rows per kind (every kind present, zero when none), recomputed from the seed."""
    rows = generate_events(spark, config, labels=True).groupBy(KIND_COLUMN).count().collect()
    counts = {kind: 0 for kind in KINDS}
    counts.update({row[KIND_COLUMN]: int(row["count"]) for row in rows})
    return counts


def count_by_defect(spark: SparkSession, config: SampleConfig) -> dict[str, int]:
    """Malformed rows per defect (every defect present, zero when none)."""
    labelled = generate_events(spark, config, labels=True)
    rows = labelled.where(F.col(DEFECT_COLUMN).isNotNull()).groupBy(DEFECT_COLUMN).count().collect()
    counts = {defect: 0 for defect in DEFECTS}
    counts.update({row[DEFECT_COLUMN]: int(row["count"]) for row in rows})
    return counts


# --- helpers --------------------------------------------------------------------------


class _Hashes:
    """Per-field pseudo-random values: a pure function of (seed, row, field)."""

    def __init__(self, seed: int) -> None:
        self.seed = F.lit(seed).cast("long")

    def uniform(self, row: Column, field: str) -> Column:
        """A double in [0, 1) from the low 53 bits of xxhash64(seed, row, field)."""
        bits = F.xxhash64(self.seed, row, F.lit(field)).bitwiseAND(F.lit(_MASK_53))
        return bits / float(1 << 53)

    def pick(self, row: Column, field: str, values: tuple[str, ...]) -> Column:
        """One of `values`, equally likely."""
        index = F.floor(self.uniform(row, field) * len(values)).cast("int")
        return F.element_at(F.array(*[F.lit(v) for v in values]), index + 1)

    def weighted(self, row: Column, field: str, shares: tuple[tuple[str, float], ...]) -> Column:
        """One of the names in `shares`, with probability proportional to its share."""
        total = sum(share for _, share in shares)
        u = self.uniform(row, field) * total
        expr: Column | None = None
        bound = 0.0
        for name, share in shares[:-1]:
            bound += share
            expr = (F.when(u < bound, F.lit(name)) if expr is None
                    else expr.when(u < bound, F.lit(name)))
        last = F.lit(shares[-1][0])
        return last if expr is None else expr.otherwise(last)


def _mobile_shares() -> tuple[tuple[str, float], ...]:
    return tuple((name, share) for name, share in DEVICE_SHARES if name in MOBILE_DEVICES)


def _event_id(g: _Hashes, src: Column) -> Column:
    """24 hex digits: 16 from a hash (looks random) + 8 from the row id (makes it unique)."""
    hashed = F.lpad(F.lower(F.hex(F.xxhash64(g.seed, src, F.lit("event_id")))), 16, "0")
    return F.concat(hashed, F.lpad(F.lower(F.hex(src)), 8, "0"))


def _iso_text(ms: Column) -> Column:
    """Epoch milliseconds as `2024-05-01T12:34:56.789Z`, built from integers so the text
    does not depend on the session time zone."""
    days = F.floor(ms / _DAY_MILLIS)
    of_day = F.pmod(ms, F.lit(_DAY_MILLIS))

    def two(value: Column) -> Column:
        return F.lpad(value.cast("string"), 2, "0")

    return F.concat(
        F.date_from_unix_date(days.cast("int")).cast("string"),
        F.lit("T"),
        two(F.floor(of_day / 3_600_000)),
        F.lit(":"),
        two(F.floor(of_day / 60_000) % 60),
        F.lit(":"),
        two(F.floor(of_day / 1000) % 60),
        F.lit("."),
        F.lpad((of_day % 1000).cast("string"), 3, "0"),
        F.lit("Z"),
    )


def describe_kinds(counts: Mapping[str, int]) -> list[str]:
    """Summary lines `kind: count (share)` in a fixed order."""
    total = sum(counts.values()) or 1
    return [f"{kind:<13} {counts.get(kind, 0):>12,}  ({counts.get(kind, 0) / total:6.2%})"
            for kind in KINDS]
