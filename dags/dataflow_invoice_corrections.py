"""Airflow DAG `dataflow_invoice_corrections`: a sample consumer of corrections.

Scheduled on the asset of billing's results table (`dataflow_core.airflow.assets`): it runs
when a backfill day, an applied plan or a micro-batch's late panes changed windows of it,
and re-issues the invoices of the changed hours only, from the events' `extra` (the spans
that changed, `corrections.changed_spans`), reading those hours' figures from the results
table. A real consumer would send them on; this one logs one line per hour.
Only when the billing pipeline is registered.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from airflow.sdk import dag, task

from dataflow_core.airflow.assets import results_asset
from dataflow_core.pipelines import all_pipelines

log = logging.getLogger("dataflow")
TABLE = "billing"


@task
def reissue_invoices(**context: Any) -> list[dict[str, Any]]:
    from dataflow_core.airflow.corrections import changed_spans
    from dataflow_core.query import literal, query

    extras = [event.extra for events in context["triggering_asset_events"].values() for event in events]
    issued = []
    for start, end in changed_spans(extras):
        rows = query(f"SELECT count(*) AS ads, sum(value) AS total FROM {TABLE} WHERE window_start >= "
                     f"CAST({literal(start)} AS TIMESTAMP) AND window_end <= CAST({literal(end)} AS TIMESTAMP)"
                     ).table.to_pylist()[0]
        log.info(f"re-issuing the invoices of {start} to {end}: {rows['ads'] or 0} ad(s), {rows['total'] or 0} s")
        issued.append({"start": start, "end": end, "ads": int(rows["ads"] or 0)})
    return issued


if TABLE in all_pipelines():
    @dag(
        dag_id="dataflow_invoice_corrections",
        description="Sample consumer: re-issues billing's invoices for the hours a correction changed.",
        schedule=[results_asset(TABLE)],
        start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
        catchup=False,
        tags=["dataflow", "assets", "sample"],
        doc_md=__doc__,
    )
    def dataflow_invoice_corrections() -> None:
        reissue_invoices()

    dataflow_invoice_corrections()
