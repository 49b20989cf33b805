"""Airflow's plugins folder for this project (`AIRFLOW__CORE__PLUGINS_FOLDER`, set by
scripts/airflow-env.sh): the pane explorer plugin, defined in dataflow_core.airflow.plugin."""

from dataflow_core.airflow.plugin.airflow_plugin import DataflowPlugin

__all__ = ["DataflowPlugin"]
