#!/usr/bin/env bash
# `make airflow` / `make airflow-stop`: Airflow standalone in the background, over the sample data.
#
#   scripts/airflow-standalone.sh start   # sample data if none, start, wait until the UI answers
#   scripts/airflow-standalone.sh stop    # stop every process it started, task processes and
#                                         # their Spark JVMs included, and say how many
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
# One user (the generated admin) both asks for backfills and approves them on this local
# Airflow: let the requester approve (docs/deployment.md, "Who approves a backfill").
export DATAFLOW_ALLOW_SELF_APPROVAL="${DATAFLOW_ALLOW_SELF_APPROVAL:-true}"

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
    # dag-processor, triggerer) and nothing else. Task supervisors start their own process
    # groups, and a Spark JVM outlives a killed parent, so every process also inherits a
    # marker in its environment that `stop` looks for.
    DATAFLOW_AIRFLOW_INSTANCE="$AIRFLOW_HOME" setsid airflow standalone >"$log" 2>&1 < /dev/null &
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

# The processes this Airflow started: the process group's, every descendant of its leader,
# and any process whose environment carries this instance's marker (a JVM whose parent died).
started_processes() {
    python3 - "${1:-0}" "$AIRFLOW_HOME" <<'PY'
import os, sys
leader, marker = int(sys.argv[1]), ("DATAFLOW_AIRFLOW_INSTANCE=" + sys.argv[2]).encode()
me = {os.getpid(), os.getppid()}
parent, group, found = {}, {}, set()
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) in me:
        continue
    pid = int(name)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        parent[pid], group[pid] = int(fields[1]), int(fields[2])
        if fields[0] == b"Z":
            continue
        with open(f"/proc/{pid}/environ", "rb") as f:
            if marker in f.read().split(b"\0"):
                found.add(pid)
    except OSError:
        continue
    if leader and group[pid] == leader:
        found.add(pid)
changed = True
while changed and leader:
    changed = False
    for pid, ppid in parent.items():
        if pid not in found and (ppid == leader or ppid in found) and pid not in me:
            found.add(pid); changed = True
print(" ".join(str(p) for p in sorted(found)))
PY
}

stop() {
    local pgid=0 pids
    if [ -f "$pidfile" ]; then pgid="$(cat "$pidfile")"; fi
    pids="$(started_processes "$pgid")"
    if [ -z "$pids" ]; then
        echo "Airflow standalone is not running (no process of $AIRFLOW_HOME left)"
        rm -f "$pidfile"
        return 0
    fi
    local count
    count="$(wc -w <<<"$pids")"
    echo "stopping airflow standalone: $count processes (api-server, scheduler, dag-processor, triggerer, task processes and their Spark JVMs) ..."
    [ "$pgid" != 0 ] && kill -TERM -- "-$pgid" 2>/dev/null
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 1 30); do
        pids="$(started_processes "$pgid")"
        [ -z "$pids" ] && { rm -f "$pidfile"; echo "stopped: no process of this Airflow is left"; return 0; }
        sleep 1
    done
    local stubborn
    stubborn="$(wc -w <<<"$pids")"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 1
    rm -f "$pidfile"
    pids="$(started_processes 0)"
    if [ -n "$pids" ]; then
        echo "processes still running after SIGKILL: $pids" >&2
        return 1
    fi
    echo "stopped: no process of this Airflow is left ($stubborn killed after 30 s)"
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    status) if running; then echo "running: $url (process group $(cat "$pidfile"))"; else echo "not running"; exit 1; fi ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
