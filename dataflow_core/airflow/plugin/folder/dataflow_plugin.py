"""Airflow's plugins folder for a checkout (`AIRFLOW__CORE__PLUGINS_FOLDER`, set by
scripts/airflow-env.sh): the pane explorer plugin, defined in dataflow_core.airflow.plugin.

Airflow loads every AirflowPlugin class this module holds. When the installed distribution
already registers the plugin through the `airflow.plugins` entry point (any install of a
pyproject.toml that declares it, editable included), this module holds none, so that Airflow
finds it once, not once per way (its second find would be listed as an import error)."""

from importlib.metadata import entry_points

from dataflow_core.airflow.plugin import airflow_plugin as _plugin  # a module: Airflow skips it


def _registered_by_entry_point() -> bool:
    return any(point.value == _plugin.ENTRY_POINT for point in entry_points(group="airflow.plugins"))


if not _registered_by_entry_point():
    DataflowPlugin = _plugin.DataflowPlugin
    __all__ = ["DataflowPlugin"]
