"""Airflow adapter: what the DAGs in `dags/` run, importable and testable without Airflow.

`settings` reads the deployment's knobs from the environment, `requests` checks a backfill
request (what JSON schema cannot say) without Spark, `tasks` holds the task bodies (each
imports Spark only when it runs, so parsing a DAG file stays cheap).
"""
