"""What a task that runs a pipeline reads and writes, reported to OpenLineage.

Through Airflow's hook lineage collector (`airflow.sdk.lineage`), not an import of the
OpenLineage provider: with `apache-airflow-providers-openlineage` installed, the provider
registers a reader of that collector and sends the datasets with the task's run events;
without it, Airflow's collector is a no-op and reporting costs nothing. The tables as the
storage locations they are (`file://`, `s3://`), the URIs OpenLineage's dataset naming
takes for files and object stores.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("dataflow")


def lineage_uris(pipeline: Any, warehouse: str) -> tuple[list[str], list[str]]:
    """The pipeline's input table, and every stage's results and pane log, as storage URIs
    under `warehouse` (a path or an object-store URI; `s3a://` is named `s3://`)."""
    from dataflow_core.pipelines import layout

    inputs = [table_location(pipeline.input_table, warehouse)]
    outputs = [table_location(name, warehouse) for stage in pipeline.stages
               for name in (layout.results(stage), layout.panes(stage))]
    return inputs, outputs


def table_location(table: str, warehouse: str) -> str:
    """A warehouse table's folder as a URI."""
    root = warehouse.rstrip("/")
    if "://" not in root:
        root = "file://" + (root if root.startswith("/") else "/" + root)
    elif root.startswith("s3a://"):
        root = "s3://" + root[len("s3a://"):]
    return f"{root}/{table}"


def report_lineage(pipeline: str, warehouse: str | None = None) -> bool:
    """Add the pipeline's inputs and outputs (`lineage_uris`) to Airflow's hook lineage
    collector; whether anything collects them (False: no lineage reader, such as the
    OpenLineage provider, is installed, or this Airflow has no collector). Never fails the
    task: lineage is a report about the run, not part of it."""
    try:
        from airflow.sdk.lineage import NoOpCollector, get_hook_lineage_collector
    except ImportError:
        return False
    collector = get_hook_lineage_collector()
    if isinstance(collector, NoOpCollector):
        return False
    try:
        from dataflow_core.pipelines import get
        from dataflow_core.query import resolve_warehouse

        inputs, outputs = lineage_uris(get(pipeline), resolve_warehouse(warehouse))
        source = _Source(pipeline)
        for uri in inputs:
            collector.add_input_asset(source, uri=uri)
        for uri in outputs:
            collector.add_output_asset(source, uri=uri)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning(f"lineage not reported: {' '.join(str(exc).split())[:300]}")
        return False
    return True


class _Source:
    """What the collector files the datasets under (it expects the hook that read or wrote)."""

    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline
