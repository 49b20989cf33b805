"""`persist_uncompressed`: how the runners keep a DataFrame they read more than once.

Spark's in-memory columns are compressed by default, and compressing is most of what
building the cache costs, while a runner's elements (event ids, decimal values, times)
hardly compress (figures: benchmarks/results/spark-runner-history.md). So the runners' caches are
kept uncompressed. The setting is captured when
`persist()` is called, so it is set for that call only: the session's own caches (a
notebook's, say) keep the user's setting.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from dataflow_core.spark.platform.delta import session_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"
_toggling = threading.Lock()  # two threads of one session never restore each other's value


def persist_uncompressed(df: "DataFrame") -> "DataFrame":
    """`df` persisted (Spark's default storage level) in uncompressed in-memory columns."""
    with _toggling, session_settings(df.sparkSession, {COMPRESSED: "false"}):
        return df.persist()
