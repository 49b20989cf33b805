"""How a pipeline's stream first reads its input, when it has no checkpoint yet (going live,
or after `dataflow reset`).

Structured Streaming's Delta source reads the table's snapshot as its first offset: with no
rate limit that is one batch of the whole history, or, in batches of Delta's default 1000
files, batches whose watermark jumps to the newest file's times and then drops the rows of
older files as too late. Going live therefore reads in bounded batches (`maxBytesPerTrigger`,
oldest files first, as the source orders a snapshot by modification time), or from a
version the operator names (`startingVersion`: only the commits after it, in commit order,
which is ingest order for an appended table). Once the checkpoint exists, its offsets say
where to go on, and these options no longer apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from dataflow_core.spark.platform.tables import path_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FIRST_BATCH_BYTES = "256m"
"""The default bound of a batch while going live: about a million narrow rows."""


@dataclass(frozen=True)
class FirstRead:
    """The operator's choices for going live (`dataflow microbatch --starting-version`,
    `--max-bytes-per-batch`)."""

    starting_version: int | None = None
    max_bytes: str = FIRST_BATCH_BYTES


def source_options(spark: "SparkSession", checkpoint: str, table: str, first: FirstRead | None,
                   say: Callable[[str], None]) -> dict[str, str]:
    """The Delta source's options for this run: bounded first batches while the stream has
    no committed offset yet, none after (the checkpoint decides)."""
    if path_exists(spark, f"{checkpoint.rstrip('/')}/commits/0"):
        return {}
    first = first or FirstRead()
    options = {"maxBytesPerTrigger": first.max_bytes}
    where = "its current snapshot, oldest files first"
    if first.starting_version is not None:
        options["startingVersion"] = str(first.starting_version)
        where = f"the commits after version {first.starting_version - 1}, in commit order"
    say(f"going live: the stream has no checkpoint yet; reading {table} from {where}, in batches of at most "
        f"{first.max_bytes} (--max-bytes-per-batch), each with its own watermark")
    return options
