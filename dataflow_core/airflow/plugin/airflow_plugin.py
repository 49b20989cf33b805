"""The Airflow plugin: mounts the pane explorer (`app.py`) in Airflow's api-server and adds it
to the UI's navigation (external views shown inside the UI at `/plugin/pane-explorer` and
`/plugin/data-docs`, the Great Expectations site the gates build).

Airflow loads it from the plugins folder `dataflow_core/airflow/plugin/folder/`
(`AIRFLOW__CORE__PLUGINS_FOLDER`, set by `scripts/airflow-env.sh`).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from dataflow_core.airflow.plugin.app import URL_PREFIX, app


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
