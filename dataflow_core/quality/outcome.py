"""What a quality gate returns (`GateOutcome`), how it fails (`GateFailed`), and what the
gates share: where the Data Docs go, the tolerated shares of bad rows, appending the rows a
gate copies aside."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.quality.docs import data_docs_root
from dataflow_core.quality.validate import ValidationReport

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from dataflow_core.pipelines import PipelineSpec

REASON = "quarantine_reason"


class GateFailed(DataflowError):
    """A gate's suite failed; the message is the readable summary."""

    def __init__(self, outcome: "GateOutcome") -> None:
        self.outcome = outcome
        super().__init__(outcome.summary())


@dataclass(frozen=True)
class GateOutcome:
    gate: str  # input, panes, results
    table: str  # what was checked
    report: ValidationReport
    rows: int  # rows validated
    quarantined: int  # rows copied to the quarantine table by this gate
    quarantine_table: str | None
    notes: tuple[str, ...] = field(default_factory=tuple)
    problem: str | None = None  # a failure beyond the suite's (e.g. nothing checked)

    @property
    def success(self) -> bool:
        return self.report.success and self.problem is None

    def summary(self) -> str:
        verdict = "passed" if self.success else "FAILED"
        text = f"{self.gate} gate on {self.table} {verdict}: {self.rows:,} rows; "
        if self.problem:
            text += self.problem + "; "
        text += self.report.summary()
        if self.quarantined:
            text += f"; {self.quarantined:,} rows quarantined in {self.quarantine_table}"
        return text

    def lines(self) -> list[str]:
        out = [f"{self.gate} gate on {self.table}: {self.rows:,} rows checked"]
        if self.problem:
            out.append(f"  FAILED: {self.problem}")
        out += ["  " + line for line in self.report.lines()]
        out += ["  " + note for note in self.notes]
        if self.quarantine_table:
            out.append(f"  {self.quarantined:,} rows quarantined in table {self.quarantine_table}")
        if self.report.docs_index:
            out.append(f"  Data Docs: {self.report.docs_index}")
        return out

    def raise_if_failed(self) -> None:
        if not self.success:
            raise GateFailed(self)


def docs_dir_of(spark: "SparkSession", docs_dir: str | os.PathLike[str] | None) -> str:
    if docs_dir is not None:
        return os.fspath(docs_dir)
    from dataflow_core.spark.platform.session import warehouse_root

    return str(data_docs_root(warehouse_root(spark)))


def instant_ms(value: str | dt.datetime | dt.date, what: str) -> int:
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, dt.date):
        moment = dt.datetime(value.year, value.month, value.day)
    else:
        try:
            moment = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            raise DataflowError(f"{what}: {value!r} is not an ISO date or time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


def share(env: str, default: float) -> float:
    raw = os.environ.get(env)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise DataflowError(f"${env}={raw!r}: not a number (a share between 0 and 1)") from None
    if not 0 <= value < 1:
        raise DataflowError(f"${env}={raw!r}: must be a share in [0, 1)")
    return value


def append_rows_to(spark: "SparkSession", rows: "DataFrame", table: str) -> int:
    """Append `rows` to `table` (created on first use); returns how many."""
    from dataflow_core.spark.platform.tables import write_table

    rows = rows.persist()
    try:
        n = rows.count()
        if n:
            write_table(spark, rows, table, mode="append")
        return n
    finally:
        rows.unpersist()


def spec_of(pipeline: "str | PipelineSpec") -> "PipelineSpec":
    from dataflow_core.pipelines import get

    return get(pipeline) if isinstance(pipeline, str) else pipeline
