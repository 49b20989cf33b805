"""The bodies of the DAGs' tasks. Each takes plain values, logs what it does as it happens
(logger `dataflow`, so every line reaches the task log at once, at its level) and returns small
JSON-able values (XCom). Spark starts inside the task's own process, on
`$DATAFLOW_SPARK_MASTER` (default local[*]) with tables under `$DATAFLOW_WAREHOUSE`, exactly
like the `dataflow` CLI; what the JVM writes to stderr is logged line by line at the level
log4j gave it (logger `dataflow.spark`), not as errors.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import logging
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from dataflow_core.errors import DataflowError
from dataflow_core.spark.sinks.runs import CHANGE_COUNTS, COUNTS as LEDGER_KEYS

Say = Callable[[str], None]


log = logging.getLogger("dataflow")
spark_log = logging.getLogger("dataflow.spark")


def log_info(message: str) -> None:
    log.info(message)


def ledger_counts(ledger: Mapping[str, Any]) -> dict[str, int]:
    """A run's ledger as the tasks hand it on (XCom): its counts, as integers."""
    return {k: int(ledger.get(k, 0)) for k in LEDGER_KEYS}


def shown_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """The counts a log line shows: the change feed's only where there were changes (a run
    that reads no change feed has none, and ten zeros would hide what it did)."""
    return {k: v for k, v in counts.items() if v or k not in CHANGE_COUNTS}


# JVM / log4j lines: "26/11/24 09:36:23 WARN MapPartitionsRDD: ..." and the JVM's own
# "WARNING: Using incubator modules: ...".
_JVM_LINE = re.compile(r"^(?:\d\d/\d\d/\d\d \d\d:\d\d:\d\d )?(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL)\b:?\s*(.*)$")
_JVM_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
               "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}


def jvm_line_level(line: str, previous: int = logging.INFO) -> tuple[int, str]:
    """The logging level and text of one line the JVM wrote; a line without a level (a stack
    trace's continuation) keeps the level of the line before it."""
    match = _JVM_LINE.match(line)
    if match:
        return _JVM_LEVELS[match.group(1)], line
    return previous, line


def _log_stream(fd: int) -> None:
    level = logging.INFO
    with os.fdopen(fd, "r", errors="replace") as stream:
        for raw in stream:
            line = raw.rstrip()
            if line:
                level, text = jvm_line_level(line, level)
                spark_log.log(level, text)


def _spark_running() -> bool:
    try:
        from pyspark import SparkContext
    except ImportError:
        return False
    return SparkContext._active_spark_context is not None


def spark_session(app: str):
    """The task's Spark session. When this starts the JVM, the JVM (and the Python workers it
    forks) get a pipe as stderr, read by a thread that logs each line at its own level:
    Airflow would otherwise log everything a task writes to stderr as ERROR."""
    if _spark_running() or os.environ.get("DATAFLOW_TASK_JVM_STDERR") == "inherit":
        return _get_spark(app)
    read_fd, write_fd = os.pipe()
    saved = os.dup(2)
    try:
        os.dup2(write_fd, 2)  # inherited by the JVM started below
        threading.Thread(target=_log_stream, args=(read_fd,), name="jvm-stderr", daemon=True).start()
        return _get_spark(app)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write_fd)


def _get_spark(app: str):
    from dataflow_core.spark.platform.session import get_spark

    return get_spark(app)


# --- days at once -----------------------------------------------------------------------


def _slot_root() -> Path:
    base = os.environ.get("AIRFLOW_HOME") or tempfile.gettempdir()
    return Path(base) / "dataflow-slots"


class NoSlot(Exception):
    """Every slot of the run is taken (raised instead of waiting when `wait=False`)."""


@contextlib.contextmanager
def day_slot(run_key: str, slots: int, say: Say = log_info, poll_s: float = 2.0, wait: bool = True) -> Iterator[int]:
    """Hold one of `slots` slots of the run `run_key` (a per-run counting semaphore made of
    `slots` lock files), waiting for one to free up, or raising NoSlot at once when `wait` is
    False (the DAG then reschedules the task, so a waiting day does not hold a worker slot).
    With the LocalExecutor every task runs on this machine, so this caps how many days of one
    backfill run at once."""
    folder = _slot_root() / re.sub(r"[^A-Za-z0-9_.-]", "_", run_key)
    folder.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        for slot in range(slots):
            handle = open(folder / f"slot-{slot}.lock", "a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                if waited:
                    say(f"got slot {slot + 1} of {slots}")
                yield slot
                return
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
        if not wait:
            raise NoSlot(f"{slots} day(s) of this run are already running (days at once = {slots})")
        if not waited:
            say(f"waiting: {slots} day(s) of this run are already running (days at once = {slots})")
            waited = True
        time.sleep(poll_s)


# --- backfill ---------------------------------------------------------------------------


def check_backfill(params: Mapping[str, Any], say: Say = log_info) -> dict[str, Any]:
    """First task: the request's checks (no Spark). Returns the plan, days included."""
    from dataflow_core.airflow.requests import check_request

    request = check_request(params)
    say(request.describe())
    say(f"days: {', '.join(request.days)}")
    return request.as_dict()


def gate_input_range(pipeline: str, start: str, end: str, run_id: str, say: Say = log_info) -> dict[str, Any]:
    """The input gate over [start, end); raises GateFailed (with the summary) when it fails."""
    from dataflow_core.quality.gates import gate_input

    spark = spark_session(f"dataflow-gate-input-{pipeline}")
    outcome = gate_input(spark, pipeline, start, end, run_id, say=say)
    for line in outcome.lines():
        say(line)
    _say_docs_link(outcome.report.docs_index, say)
    outcome.raise_if_failed()
    return {"rows": outcome.rows, "quarantined": outcome.quarantined,
            "data_docs": outcome.report.docs_index}


def checked(spark: Any, pipeline: str) -> None:
    """The pipeline checked against its input table (`pipelines.check.preflight`: every
    mistake one line; value types left out inferred) before a run uses it."""
    from dataflow_core.pipelines.check import preflight
    from dataflow_core.spark.platform.session import warehouse_root

    preflight(pipeline, warehouse_root(spark))


def _say_docs_link(index: str | None, say: Say) -> None:
    """The Data Docs page as a link the browser opens (served by the Airflow plugin), beside
    the file path the gate logs: a path in a task log cannot be clicked."""
    from dataflow_core.airflow.settings import data_docs_url

    url = data_docs_url(index)
    if url:
        say(f"Data Docs in the browser: {url}")


def backfill_day(
    pipeline: str, day: str, replay: bool, batch_interval: str, days_at_once: int, run_key: str,
    say: Say = log_info, wait_for_slot: bool = True,
) -> dict[str, Any]:
    """One day [day, day + 1) of a backfill, holding a slot of the run's days-at-once (raises
    NoSlot when none is free and `wait_for_slot` is False)."""
    from dataflow_core.airflow.assets import results_versions, run_corrections
    from dataflow_core.airflow.lineage import report_lineage
    from dataflow_core.spark.jobs.backfill import run_backfill

    first = dt.date.fromisoformat(day)
    end = (first + dt.timedelta(days=1)).isoformat()
    with day_slot(run_key, days_at_once, say, wait=wait_for_slot):
        spark = spark_session(f"dataflow-backfill-{pipeline}")
        checked(spark, pipeline)
        before = results_versions(pipeline)
        say(f"backfill {pipeline} [{day}, {end}) {'replay' if replay else 'batch'}")
        started = time.monotonic()
        result = run_backfill(spark, pipeline, day, end, replay=replay, batch_interval=batch_interval,
                              progress=lambda m: say("  " + m))
    ledger = ledger_counts(result.ledger)
    say(f"run {result.run_id}: " + ", ".join(f"{k} {v:,}" for k, v in ledger.items())
        + f"; ledger {'balances' if result.ledger_ok else 'DOES NOT balance'} "
        + f"({time.monotonic() - started:.0f} s)")
    if not result.ledger_ok:
        raise DataflowError(f"run {result.run_id} of {pipeline} for {day}: the ledger does not balance: {result.ledger}")
    report_lineage(pipeline)
    return {"day": day, "run_id": result.run_id, "ledger": ledger, "ledger_ok": result.ledger_ok,
            "written": written_per_stage(result.ledger), "corrections": run_corrections(pipeline, [result.run_id], before)}


def written_per_stage(ledger: Mapping[str, Any]) -> dict[str, int]:
    """Panes and retractions a run wrote, per stage output (from its ledger)."""
    return {str(stage): int(c.get("panes", 0)) + int(c.get("retractions", 0))
            for stage, c in (ledger.get("per_stage") or {}).items()}


def add_written(parts: Iterable[Mapping[str, Any] | None]) -> dict[str, int]:
    total: dict[str, int] = {}
    for part in parts:
        for stage, n in ((part or {}).get("written") or {}).items():
            total[stage] = total.get(stage, 0) + int(n)
    return total


def gate_output(pipeline: str, run_ids: Iterable[str] | None, run_id: str, say: Say = log_info,
                written: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Pane and results gates of every stage for the windows the runs touched. `written`
    (panes and retractions the runs wrote, per stage output): a stage whose gate then checks
    no pane at all fails, since a gate over nothing proves nothing."""
    from dataflow_core.quality.gates import GateFailed, gate_outputs

    ids = None if run_ids is None else [r for r in run_ids if r]
    spark = spark_session(f"dataflow-gate-output-{pipeline}")
    outcomes = gate_outputs(spark, pipeline, ids, run_id, say=say, written=written)
    failed = [o for o in outcomes if not o.success]
    if failed:
        _say_docs_link(next((o.report.docs_index for o in outcomes if o.report.docs_index), None), say)
    for outcome in failed:
        log.error("FAILED: " + outcome.summary())
    if failed:
        if len(failed) == 1:
            raise GateFailed(failed[0])
        raise DataflowError(" | ".join(o.summary() for o in failed))
    docs = next((o.report.docs_index for o in outcomes if o.report.docs_index), None)
    _say_docs_link(docs, say)
    return {"checked": [f"{o.gate}:{o.table}" for o in outcomes], "rows": sum(o.rows for o in outcomes),
            "data_docs": docs}


def headline(plan: Mapping[str, Any], days: Iterable[Mapping[str, Any] | None],
             input_gate: Mapping[str, Any] | None, output_gate: Mapping[str, Any] | None,
             approval: str | None = None) -> tuple[bool, str]:
    """The run's status and each gate's outcome in one line, from what the tasks returned (None:
    the task failed or never ran, since a failed task returns nothing): whether the run
    succeeded, and the line. The verdicts come first (a log viewer may cut a long line), the
    details after; `approval` (a run that waited for one) says how it was decided, after the
    input gate it followed. Pure, so that the first line of `summary` can be trusted."""
    done = [d for d in days if d]
    expected = len(plan.get("days") or []) or len(done)
    balanced = all(d.get("ledger_ok") for d in done)
    gate_in = "input gate passed" if input_gate is not None else "input gate FAILED or did not run"
    if output_gate is not None:
        gate_out = "output gate passed"
    else:
        gate_out = "output gate FAILED" if done and len(done) == expected and balanced else "output gate did not run"
    ok = input_gate is not None and output_gate is not None and len(done) == expected and balanced
    days_text = f"{len(done)} of {expected} day(s) done" + ("" if balanced else " (a ledger DOES NOT balance)")
    details = [f"backfill of {plan.get('pipeline', '?')} over [{plan.get('start', '?')}, {plan.get('end', '?')}), "
               f"{'replay' if plan.get('replay') else 'batch'}: {len(done)} day(s)"]
    if input_gate is not None:
        details.append(f"input: {int(input_gate.get('rows', 0)):,} rows, {int(input_gate.get('quarantined', 0)):,} quarantined")
    if output_gate is not None:
        details.append(f"output: {int(output_gate.get('rows', 0)):,} rows of {', '.join(output_gate.get('checked') or [])}")
    verdicts = ", ".join(v for v in (gate_in, approval, days_text, gate_out) if v)
    return ok, f"{'SUCCEEDED' if ok else 'FAILED'}: {verdicts} | " + "; ".join(details)


def summarize(plan: Mapping[str, Any], days: Iterable[Mapping[str, Any] | None],
              gates: Mapping[str, Any] | None = None, say: Say = log_info,
              input_gate: Mapping[str, Any] | None = None, warehouse: str | None = None,
              approval: str | None = None) -> dict[str, Any]:
    """The run's status and its gates' outcomes first (`headline`), then a line per day that
    did not finish naming its run and the commands that resume and abandon it
    (`unfinished_days`), then the days' ledgers added up: one line per day and the totals.
    Runs after failures too (the DAGs give it trigger rule all_done), so whoever opens this
    one log learns what happened."""
    rows = sorted((d for d in days if d), key=lambda d: d["day"])
    ok, line = headline(plan, rows, input_gate, gates, approval)
    say(line)
    unfinished = [] if plan.get("require_approval") else unfinished_days(plan, rows, warehouse)
    for text in unfinished:
        say(text)
    total = {k: sum(int(d["ledger"].get(k, 0)) for d in rows) for k in LEDGER_KEYS}
    balanced = all(d.get("ledger_ok") for d in rows) and len(rows) == len(plan.get("days", rows))
    width = max(len(k) for k in LEDGER_KEYS)
    per_day = ("read", "accepted", "duplicates", "quarantined", "panes")
    say("  day         run id                  " + " ".join(f"{k:>11}" for k in per_day))
    for d in rows:
        say(f"  {d['day']}  {d['run_id'][:22]:<22}  " + " ".join(f"{d['ledger'].get(k, 0):>11,}" for k in per_day))
    say("ledger (all days):")
    for key, count in shown_counts(total).items():
        say(f"  {key.replace('_', ' '):<{width}}  {count:>12,}")
    say(f"  read = accepted + duplicates + quarantined: {total['read']:,} = {total['accepted']:,} + "
        f"{total['duplicates']:,} + {total['quarantined']:,}  {'OK' if balanced else 'MISMATCH'}")
    docs = (gates or {}).get("data_docs") or (input_gate or {}).get("data_docs")
    if docs:
        say(f"Data Docs: {docs}")
        _say_docs_link(docs, say)
    # Small: Airflow logs the returned value on one line ("Returned value was: ...").
    return {"pipeline": plan.get("pipeline"), "days": len(rows), "read": total["read"], "panes": total["panes"],
            "ledger_ok": balanced, "succeeded": ok, "run_ids": [d["run_id"] for d in rows],
            **({"unfinished": unfinished} if unfinished else {}), **({"approval": approval} if approval else {})}


def unfinished_days(plan: Mapping[str, Any], done: Iterable[Mapping[str, Any]], warehouse: str | None = None) -> list[str]:
    """One line per day of `plan` that did not finish: its latest run (a failed task returns
    nothing, so the run is found in `dataflow_runs`, read without Spark), what happened to it
    and when, and the commands that resume and abandon it."""
    finished = {d["day"] for d in done}
    missing = [day for day in plan.get("days") or [] if day not in finished]
    if not missing:
        return []
    pipeline = str(plan.get("pipeline"))
    try:
        runs = _day_runs(pipeline, warehouse)
    except Exception as exc:  # noqa: BLE001 - the summary must say what it can
        return [f"days {', '.join(missing)} did not finish; cannot tell their runs: {' '.join(str(exc).split())[:300]}"]
    return [_unfinished_day(pipeline, day, runs.get(day)) for day in missing]


def _day_runs(pipeline: str, warehouse: str | None) -> dict[str, dict[str, Any]]:
    """The latest backfill run of each day (a run over [day, day + 1)) of `pipeline`: its id,
    command, arguments and last status, with when and why when it failed."""
    import json

    from dataflow_core.model.time import format_instant
    from dataflow_core.query import list_tables, literal, query

    if "dataflow_runs" not in list_tables(warehouse):
        return {}
    rows = query("SELECT run_id, command, args, status, recorded_at, reason FROM dataflow_runs WHERE pipeline = "
                 f"{literal(pipeline)} ORDER BY recorded_at", warehouse).table.to_pylist()
    runs: dict[str, dict[str, Any]] = {}
    for row in rows:
        args = json.loads(row["args"] or "{}")
        start, end = args.get("start"), args.get("end")
        if not start or not end or row["command"] not in ("backfill", "replay"):
            continue
        first = dt.datetime.fromisoformat(start.replace("Z", "+00:00"))
        day = first.date().isoformat()
        if format_instant(int(first.timestamp() * 1000) + 86_400_000) != end:
            continue  # not one day's run
        run = runs.get(day)
        if run is None or run["run_id"] != row["run_id"]:
            run = runs[day] = {**row, "statuses": set()}
        run["statuses"].add(row["status"])
        if row["status"] == "failed":
            run.update(failed_at=row["recorded_at"], reason=row["reason"])
    return runs


def _unfinished_day(pipeline: str, day: str, run: Mapping[str, Any] | None) -> str:
    from dataflow_core.spark.sinks.runs import FINISHED, resume_command

    if run is None:
        return (f"day {day} did not finish and started no run (its backfill_day task's log says why: the pipeline may "
                "be locked by another run, named there)")
    if FINISHED in run["statuses"]:
        return f"day {day}: run {run['run_id']} finished, but its task did not (see the backfill_day task's log)"
    if "abandoned by the operator" in str(run.get("reason")):
        return f"day {day}: run {run['run_id']} was abandoned at {run['failed_at']:%Y-%m-%d %H:%M:%S} UTC; run the day again"
    if run.get("failed_at") is not None:
        what = f"failed at {run['failed_at']:%Y-%m-%d %H:%M:%S} UTC ({' '.join(str(run['reason']).split())[:300]})"
    else:
        what = "did not finish (its process stopped)"
    return (f"day {day}: run {run['run_id']} {what}; it has the pipeline locked until resumed or abandoned: resume it with "
            f"`{resume_command(pipeline, run['run_id'], run['command'], run['args'])}` (or clear the day's task), or "
            f"abandon it (its writes undone) with `dataflow backfill --pipeline {pipeline} --abandon {run['run_id']}`")


def as_list(pulled: Any) -> list[Any]:
    """What `xcom_pull` gives for a mapped task, as a list: one map index comes back as the
    value itself, none as None."""
    if pulled is None:
        return []
    return [p for p in pulled if p is not None] if isinstance(pulled, list) else [pulled]
