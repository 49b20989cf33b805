#!/usr/bin/env bash
# `make airflow` / `make airflow-stop`: Airflow standalone in the background, over the sample data.
#
#   scripts/airflow-standalone.sh start   # sample data if none, start, wait until the UI answers
#   scripts/airflow-standalone.sh stop    # stop every process it started (its process group)
#   scripts/airflow-standalone.sh status
#
# Environment: scripts/airflow-env.sh (AIRFLOW_HOME=.airflow, DATAFLOW_WAREHOUSE=warehouse,
# port $AIRFLOW__API__PORT, default 8080). The log is $AIRFLOW_HOME/standalone.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/airflow-env.sh
source "$root/scripts/airflow-env.sh"
pidfile="$AIRFLOW_HOME/standalone.pid"
log="$AIRFLOW_HOME/standalone.log"
url="http://localhost:$AIRFLOW__API__PORT"
passwords="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
SAMPLE_ROWS="${DATAFLOW_SAMPLE_ROWS:-20000}"

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

start() {
    if running; then
        echo "Airflow is already running (process group $(cat "$pidfile")): $url"
        show_login
        return 0
    fi
    if [ ! -d "$DATAFLOW_WAREHOUSE/video_events/_delta_log" ]; then
        echo "no sample data in $DATAFLOW_WAREHOUSE: generating $SAMPLE_ROWS rows into table video_events ..."
        dataflow generate --rows "$SAMPLE_ROWS" --seed 42 --table video_events
    fi
    echo "starting airflow standalone (log: $log) ..."
    # Its own session and process group, so `stop` can end all of it (api-server, scheduler,
    # dag-processor, triggerer and the task processes they start) and nothing else.
    setsid airflow standalone >"$log" 2>&1 < /dev/null &
    echo $! >"$pidfile"
    for _ in $(seq 1 180); do
        if ! running; then
            echo "airflow standalone exited; the end of $log:" >&2
            tail -n 30 "$log" >&2
            rm -f "$pidfile"
            return 1
        fi
        if curl -fsS "$url/api/v2/monitor/health" >/dev/null 2>&1 && [ -f "$passwords" ]; then
            echo
            echo "Airflow is up: $url"
            show_login
            echo "DAGs: $AIRFLOW__CORE__DAGS_FOLDER; tables: $DATAFLOW_WAREHOUSE"
            echo "stop it with: make airflow-stop"
            return 0
        fi
        sleep 1
    done
    echo "Airflow did not answer on $url within 180 s; see $log" >&2
    return 1
}

show_login() {
    local password
    password="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("admin", "?"))' "$passwords" 2>/dev/null || echo '?')"
    echo "log in as user: admin   password: $password"
    echo "(the password is kept in $passwords)"
}

stop() {
    if ! running; then
        echo "Airflow standalone is not running (no live process in $pidfile)"
        rm -f "$pidfile"
        return 0
    fi
    local pgid
    pgid="$(cat "$pidfile")"
    echo "stopping airflow standalone (process group $pgid) ..."
    kill -TERM -- "-$pgid" 2>/dev/null || true
    for _ in $(seq 1 30); do
        kill -0 -- "-$pgid" 2>/dev/null || { rm -f "$pidfile"; echo "stopped"; return 0; }
        sleep 1
    done
    kill -KILL -- "-$pgid" 2>/dev/null || true
    rm -f "$pidfile"
    echo "stopped (killed after 30 s)"
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    status) if running; then echo "running: $url (process group $(cat "$pidfile"))"; else echo "not running"; exit 1; fi ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
