"""The ids of the DAGs in dags/ that belong to one pipeline: the DAG files name their DAGs
with these, and the plugin asks Airflow's auth manager about them (`plugin/access.py`), so
that "read access to a pipeline's DAGs" means the DAGs that exist."""

from __future__ import annotations


def daily_dag_id(pipeline: str) -> str:
    return f"dataflow_daily__{pipeline}"


def microbatch_dag_id(pipeline: str) -> str:
    return f"dataflow_microbatch__{pipeline}"


def pipeline_dag_ids(pipeline: str) -> tuple[str, ...]:
    """The DAGs that are the pipeline's own (the shared ones, such as `dataflow_backfill`, take
    any pipeline as a parameter, so read access to them says nothing about one pipeline)."""
    return daily_dag_id(pipeline), microbatch_dag_id(pipeline)
