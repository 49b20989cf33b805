#!/usr/bin/env bash
# The environment for running this project's DAGs with the real Airflow on one machine.
#
#   source scripts/airflow-env.sh            # export it into the current shell
#   scripts/airflow-env.sh airflow standalone  # or run one command inside it
#
# Airflow's home (SQLite DB, logs, generated admin password) stays inside the project in
# .airflow/ (gitignored); every setting can be overridden by exporting it beforehand.

_dataflow_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

export AIRFLOW_HOME="${AIRFLOW_HOME:-$_dataflow_root/.airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$_dataflow_root/dags}"
export AIRFLOW__CORE__LOAD_EXAMPLES="${AIRFLOW__CORE__LOAD_EXAMPLES:-False}"
# The pane explorer (Browse -> Pane explorer): dataflow_core/airflow/plugin/. Installed (make
# setup's editable install too) Airflow finds it by the airflow.plugins entry point; this folder
# then holds no plugin class, so it is registered once.
export AIRFLOW__CORE__PLUGINS_FOLDER="${AIRFLOW__CORE__PLUGINS_FOLDER:-$_dataflow_root/dataflow_core/airflow/plugin/folder}"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite:///$AIRFLOW_HOME/airflow.db}"
# Standalone's LocalExecutor starts `parallelism` worker processes (32 by default: far too
# many for a laptop, each task starting its own Spark driver); one per core, at least 2.
_dataflow_cores="$(nproc 2>/dev/null || echo 2)"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-$(( _dataflow_cores < 2 ? 2 : _dataflow_cores ))}"
export AIRFLOW__API__WORKERS="${AIRFLOW__API__WORKERS:-1}"
export AIRFLOW__API__PORT="${AIRFLOW__API__PORT:-8080}"
# Task processes talk to the api-server's execution API; follow the port when it is changed.
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="${AIRFLOW__CORE__EXECUTION_API_SERVER_URL:-http://localhost:$AIRFLOW__API__PORT/execution/}"
unset _dataflow_cores
export DATAFLOW_SPARK_MASTER="${DATAFLOW_SPARK_MASTER:-local[*]}"
export DATAFLOW_WAREHOUSE="${DATAFLOW_WAREHOUSE:-$_dataflow_root/warehouse}"
# Task processes import `jobs` and `dataflow_core` from the project even without `pip install -e .`.
export PYTHONPATH="$_dataflow_root${PYTHONPATH:+:$PYTHONPATH}"
if [ -x "$_dataflow_root/.venv/bin/airflow" ]; then
    export PATH="$_dataflow_root/.venv/bin:$PATH"
fi
mkdir -p "$AIRFLOW_HOME"
unset _dataflow_root

# Executed rather than sourced: run the given command in this environment.
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "$#" -gt 0 ]; then
    exec "$@"
fi
