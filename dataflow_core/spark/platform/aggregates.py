"""`one_job`: several one-row aggregates computed by one Spark job.

Each `collect()` is a Spark job, and on the few thousand rows of a micro-batch a job's
scheduling costs more than its work; aggregates of one batch's frames (its counts, its
event-time range, a stage's pane counts and holds) are asked for together instead.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def one_job(*aggregates: "DataFrame") -> dict[str, Any]:
    """The columns of these one-row aggregates, computed by one Spark job (their union)
    rather than one job each. Column names must differ between the aggregates."""
    from pyspark.sql import functions as F

    names = [c for agg in aggregates for c in agg.columns]
    padded = [agg.select(*[F.col(c) if c in agg.columns else F.lit(None).alias(c) for c in names]) for agg in aggregates]
    rows = functools.reduce(lambda a, b: a.unionByName(b), padded).collect()
    return {c: rows[i][c] for i, agg in enumerate(aggregates) for c in agg.columns}
