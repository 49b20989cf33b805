"""The Airflow plugin: mounts the pane explorer (`app.py`) in Airflow's api-server and adds it
to the UI's navigation (external views shown inside the UI at `/plugin/pane-explorer` and
`/plugin/data-docs`, the Great Expectations site the gates build).

Installed, Airflow finds it through the `airflow.plugins` entry point (pyproject.toml, named
`ENTRY_POINT` here). A checkout may also name the plugins folder
`dataflow_core/airflow/plugin/folder/` (`AIRFLOW__CORE__PLUGINS_FOLDER`, set by
`scripts/airflow-env.sh`); that folder offers the class only when no entry point does, since
Airflow would report the second one found as an import error ("already registered").
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from dataflow_core.airflow.plugin.app import URL_PREFIX, app

ENTRY_POINT = "dataflow_core.airflow.plugin.airflow_plugin:DataflowPlugin"


class DataflowPlugin(AirflowPlugin):
    name = "dataflow"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Dataflow pane explorer"}]
    external_views = [{
        "name": "Pane explorer",
        "href": URL_PREFIX + "/",
        "destination": "nav",
        "category": "browse",
        "url_route": "pane-explorer",
    }, {
        "name": "Data Docs",
        "href": URL_PREFIX + "/data-docs/index.html",
        "destination": "nav",
        "category": "browse",
        "url_route": "data-docs",
    }]
