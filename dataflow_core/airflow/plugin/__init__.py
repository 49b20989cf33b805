"""The pane explorer in the Airflow UI: `explorer` (data, through the fast reader), `app`
(the FastAPI pages), `airflow_plugin` (the plugin Airflow loads from `folder/`)."""
