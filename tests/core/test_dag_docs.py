"""The micro-batch DAG's description (its `doc_md`, shown in Airflow) says what its task does
with a pipeline another run holds: skipped while that run is alive (busy, exit 75), failed
when it is gone or failed (stuck, exit 76). Read from the file: no Airflow import."""

from __future__ import annotations

import ast
from pathlib import Path

from dataflow_core.airflow import batch_task
from dataflow_core.errors import BUSY_EXIT, STUCK_EXIT

DAG = Path(__file__).parents[2] / "dags" / "dataflow_microbatch.py"


def test_the_microbatch_dag_says_a_stuck_pipeline_fails_its_task_and_a_busy_one_skips_it():
    doc = " ".join(ast.get_docstring(ast.parse(DAG.read_text())).split())
    assert f"busy (exit {BUSY_EXIT}" in doc and "is skipped" in doc
    assert f"(exit {STUCK_EXIT}, `PipelineStuck`) *fails*" in doc
    assert "or a backfill holds it) is skipped" not in doc, "a held pipeline is not always a skip"
    assert "PipelineStuck" in (batch_task.microbatch_task.__doc__ or ""), "the task's own rule, which the doc restates"
