"""The Airflow plugin: mounts the pane explorer (`app.py`) in Airflow's api-server and adds it
to the UI's navigation (an external view shown inside the UI at `/plugin/pane-explorer`).

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
    }]
