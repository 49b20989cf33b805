"""A backfill request from the trigger form: its JSON schemas, and the checks they cannot say.

The form (Airflow `Param`s built from `backfill_param_schemas`) refuses a value of the wrong
shape before a run exists: an unknown pipeline (enum), a date that is not `YYYY-MM-DD`, a
mode that is neither `batch` nor `replay`, days at once outside 1..max. What a schema cannot
say (end not after start, a range longer than the configured maximum, an input table that
does not exist) is checked by `check_request`, which the DAG's first task runs before any
Spark work; each failure is one line.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dataflow_core.airflow import settings
from dataflow_core.errors import DataflowError

DATE_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
DURATION_PATTERN = r"^[1-9][0-9]*(ms|s|m|h|d)$"  # the model's durations, positive, one unit
MODES = ("batch", "replay")


def pipeline_names() -> list[str]:
    from dataflow_core.pipelines import all_pipelines

    return list(all_pipelines())


def backfill_param_schemas() -> dict[str, dict[str, Any]]:
    """name -> (default, JSON-schema keywords) of the `dataflow_backfill` form, in form order."""
    names = pipeline_names()
    max_parallel = settings.max_parallel_days()
    return {
        "pipeline": {
            "default": "billing" if "billing" in names else (names[0] if names else None),
            "type": "string",
            "enum": names,
            "title": "Pipeline",
            "description": "A registered pipeline (dataflow pipelines lists them).",
        },
        "start": {
            "default": "2024-05-01",
            "type": "string",
            "format": "date",
            "pattern": DATE_PATTERN,
            "title": "Start (first day)",
            "description": (
                "First day of event time to backfill (UTC). The date picker shows dates in your "
                "browser's format (mm/dd/yyyy in US English); typed in the API or CLI: YYYY-MM-DD."
            ),
        },
        "end": {
            "default": "2024-05-03",
            "type": "string",
            "format": "date",
            "pattern": DATE_PATTERN,
            "title": "End (day after the last)",
            "description": (
                "The day after the last day: the range is [start, end), so May 1 to May 3 "
                f"backfills May 1 and 2. End after start, at most {settings.max_backfill_days()} days "
                "(checked by the first task, check_request, within seconds)."
            ),
        },
        "mode": {
            "default": "batch",
            "type": "string",
            "enum": list(MODES),
            "title": "Mode",
            "description": (
                "batch: every window from the input as it stands, correcting earlier results. "
                "replay: the input in arrival order as micro-batches, writing the pane history "
                "a live pipeline would have emitted."
            ),
        },
        "batch_interval": {
            "default": "1m",
            "type": "string",
            "pattern": DURATION_PATTERN,
            "title": "Replay batch interval",
            "description": (
                "replay mode only: processing time per micro-batch, a whole number above 0 and a "
                "unit ms, s, m, h or d (30s, 1m, 5m, 1h)."
            ),
        },
        "days_at_once": {
            "default": 1,
            "type": "integer",
            # exclusive bounds: the form's number box would silently clamp to minimum/maximum
            "exclusiveMinimum": 0,
            "exclusiveMaximum": max_parallel + 1,
            "title": "Days at once",
            "description": (
                f"How many days run at the same time: a whole number from 1 to {max_parallel} "
                f"(more than 0, less than {max_parallel + 1})."
            ),
        },
        "require_approval": {
            "default": False,
            "type": "boolean",
            "title": "Require approval",
            "description": (
                "batch mode only: plan the corrections over the whole range and apply nothing until "
                "someone approves them. The task approve_backfill shows what will change (Required "
                "actions); Approve applies exactly that plan, Reject discards it. Both are recorded in "
                "dataflow_runs with who decided. The pane explorer's plan view shows every window."
            ),
        },
    }


@dataclass(frozen=True)
class BackfillRequest:
    pipeline: str
    start: dt.date
    end: dt.date  # exclusive
    replay: bool
    batch_interval: str
    days_at_once: int
    require_approval: bool = False

    @property
    def days(self) -> list[str]:
        count = (self.end - self.start).days
        return [(self.start + dt.timedelta(days=i)).isoformat() for i in range(count)]

    def describe(self) -> str:
        mode = f"replay (batch interval {self.batch_interval})" if self.replay else "batch"
        how = "planned for approval, then applied as one run" if self.require_approval else (
            f"{self.days_at_once} day(s) at once")
        return f"backfill {self.pipeline} over [{self.start}, {self.end}): {len(self.days)} day(s), {mode}, {how}"

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "start": self.start.isoformat(), "end": self.end.isoformat(),
                "replay": self.replay, "batch_interval": self.batch_interval,
                "days_at_once": self.days_at_once, "days": self.days, "require_approval": self.require_approval}


def _date(params: Mapping[str, Any], name: str) -> dt.date:
    raw = params.get(name)
    try:
        return dt.date.fromisoformat(str(raw).strip())
    except ValueError:
        raise DataflowError(f"{name} {raw!r} is not a date (YYYY-MM-DD)") from None


def check_request(params: Mapping[str, Any], warehouse: str | None = None) -> BackfillRequest:
    """The checks JSON schema cannot make, without Spark; raises a one-line DataflowError."""
    from dataflow_core.model.time import parse_duration
    from dataflow_core.model.windows import GlobalWindows
    from dataflow_core.pipelines import get

    spec = get(str(params.get("pipeline")))
    start, end = _date(params, "start"), _date(params, "end")
    if end <= start:
        raise DataflowError(f"end {end} is not after start {start}: the range [start, end) is empty")
    days = (end - start).days
    limit = settings.max_backfill_days()
    if days > limit:
        raise DataflowError(
            f"range [{start}, {end}) is {days} days, more than the maximum of {limit} "
            "(split it into several runs, or raise $DATAFLOW_BACKFILL_MAX_DAYS)"
        )
    mode = params.get("mode", "batch")
    if mode not in MODES:
        raise DataflowError(f"mode {mode!r}: use batch or replay")
    interval = str(params.get("batch_interval") or "1m")
    try:
        if parse_duration(interval) <= 0:
            raise ValueError("not positive")
    except ValueError as exc:
        raise DataflowError(f"batch_interval {interval!r}: {exc}") from None
    at_once = int(params.get("days_at_once") or 1)
    if not 1 <= at_once <= settings.max_parallel_days():
        raise DataflowError(f"days_at_once {at_once}: use 1 to {settings.max_parallel_days()}")
    if isinstance(spec.stages[0].strategy.window_fn, GlobalWindows):
        raise DataflowError(
            f"pipeline {spec.name!r}: its first stage has one global window, which no event-time "
            "range owns, so it cannot be backfilled by day"
        )
    approval = bool(params.get("require_approval"))
    if approval and mode == "replay":
        raise DataflowError("require_approval plans the corrections of a batch backfill; a replay writes the pane "
                            "history a live run would have emitted and corrects nothing: choose mode batch, or "
                            "untick Require approval")
    _check_input_table(spec.input_table, warehouse)
    return BackfillRequest(spec.name, start, end, mode == "replay", interval, at_once, approval)


def _check_input_table(table: str, warehouse: str | None) -> None:
    """A local warehouse is looked at directly (no Spark); a URI is left to the input gate."""
    from dataflow_core.spark.platform.session import resolve_warehouse

    root = resolve_warehouse(warehouse)
    if "://" in root:
        return
    if not (Path(root) / table / "_delta_log").is_dir():
        tables = sorted(p.parent.name for p in Path(root).glob("*/_delta_log") if p.is_dir())
        listing = f"it has: {', '.join(tables)}" if tables else "it has no tables"
        raise DataflowError(
            f"input table {table!r} not found in warehouse {root} ({listing}); generate a sample "
            f"with `dataflow generate --table {table}` or point $DATAFLOW_WAREHOUSE at the right place"
        )
