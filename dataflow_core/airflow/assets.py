"""Each stage's results table as an Airflow asset, and the asset events that tell downstream
DAGs which windows a run changed.

A backfill day, an applied plan and a micro-batch read, after their run, the change feed
of the commits the run made to each results table (`run_corrections`) and publish one asset
event per table whose windows changed, its `extra` the summary `airflow.corrections` makes
(which windows, how many, the largest changes, the run, why). A run that changed nothing
publishes nothing. Published through an asset alias (`CORRECTIONS`, the tasks' outlet):
Airflow emits an event for every plain outlet of a task that succeeds, and an unchanged
table must not wake its consumers. A consumer schedules on `results_asset(table)`
(`dags/dataflow_invoice_corrections.py`).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

from airflow.sdk import Asset, AssetAlias

log = logging.getLogger("dataflow")

CORRECTIONS = AssetAlias(name="dataflow_corrections")
"""The outlet of every task that runs a pipeline: its events name the results tables changed."""


def results_asset(table: str) -> Asset:
    """The asset of a stage's results table (`pipelines.layout.results`)."""
    return Asset(name=f"dataflow.results.{table}", uri=f"dataflow://results/{table}", group="dataflow")


def results_versions(pipeline: str, warehouse: str | None = None) -> dict[str, int | None]:
    """Each stage's results table's version now (-1: no table yet; None: it cannot be read
    without Spark, and its run publishes no event, as `run_corrections` logs), taken before a
    run so that `run_corrections` reads only the commits after it. Without Spark (delta-rs);
    never fails the run it precedes."""
    from dataflow_core.pipelines import get, layout
    from dataflow_core.query import list_tables, open_table

    names = [layout.results(stage) for stage in get(pipeline).stages]
    try:
        tables = set(list_tables(warehouse))
    except Exception:  # noqa: BLE001 - see the docstring
        return {name: None for name in names}
    versions: dict[str, int | None] = {}
    for name in names:
        try:
            versions[name] = open_table(name, warehouse).version() if name in tables else -1
        except Exception:  # noqa: BLE001 - see the docstring
            versions[name] = None
    return versions


def run_corrections(pipeline: str, run_ids: Iterable[str], before: Mapping[str, int | None], late_only: bool = False,
                    warehouse: str | None = None) -> list[dict[str, Any]]:
    """Per results table the run (`run_ids`: the ids its rows carry) changed, the summary of
    its changed windows (`corrections.change_summary`), read from the change feed of the
    commits after `before` (`results_versions`) that are the run's. `late_only`: a
    micro-batch, whose windows changed by late panes only are corrections. A table whose
    feed cannot be read is logged and left out: the run's writes stand either way."""
    from dataflow_core.airflow.corrections import change_summary, run_commits, window_changes
    from dataflow_core.pipelines import get, layout

    ids = [r for r in run_ids if r]
    out = []
    for stage in get(pipeline).stages:
        table = layout.results(stage)
        try:
            rows = _feed_after(table, before.get(table), warehouse)
        except Exception as exc:  # noqa: BLE001 - the event is lost, the run is not
            log.error(f"no asset event for {table}: its change feed cannot be read ({' '.join(str(exc).split())[:300]})")
            continue
        changes = window_changes(run_commits(rows, ids), stage.key_columns, late_only=late_only)
        summary = change_summary(changes, pipeline=pipeline, table=table, key_columns=stage.key_columns,
                                 run_id=ids[0] if ids else "", late_data=late_only)
        if summary:
            out.append(summary)
    return out


def _feed_after(table: str, version: int | None, warehouse: str | None) -> list[dict[str, Any]]:
    """The change-feed rows of `table`'s commits after `version` (none when it has none)."""
    import pyarrow as pa

    from dataflow_core.query import list_tables, open_table

    if version is None:
        raise ValueError("its version before the run could not be read")
    if table not in list_tables(warehouse):
        return []
    delta = open_table(table, warehouse)
    if delta.version() <= version:
        return []
    return pa.RecordBatchReader.from_stream(delta.load_cdf(starting_version=version + 1)).read_all().to_pylist()


def publish(outlet_events: Any, summaries: Iterable[Mapping[str, Any]]) -> None:
    """One asset event per changed table (through `CORRECTIONS`), its `extra` the summary."""
    for summary in summaries:
        outlet_events[CORRECTIONS].add(results_asset(str(summary["table"])), extra=dict(summary))
        log.info(f"asset event for {summary['table']}: {summary['count']:,} window(s) changed "
                 f"({summary['reason']}, run {summary['run_id']}), {summary['range']['start']} to "
                 f"{summary['range']['end']}")
