#!/usr/bin/env bash
# Manages the SecantusDB test server (a MongoDB-wire-compatible server from PyPI).
#
#   scripts/db.sh install                      create .venv and install SecantusDB into it
#   scripts/db.sh start [--storage-path DIR]   start a server on a free loopback port;
#                                              prints its mongodb:// URI on stdout
#   scripts/db.sh stop                         stop the server started by `start`
#   scripts/db.sh status                       tell whether the recorded server is running
#
# State lives in .tandem-test/ at the repository root (log, pid and port files),
# or in $TANDEM_DB_STATE_DIR when set (scripts/test.sh gives each run its own, so
# that concurrent runs do not share a pid file).
# Without --storage-path the server keeps its data in memory (`:memory:`).
set -euo pipefail

SECANTUS_VERSION="0.7.0b3"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STATE="${TANDEM_DB_STATE_DIR:-$ROOT/.tandem-test}"
PID_FILE="$STATE/secantus.pid"
PORT_FILE="$STATE/secantus.port"
PYTHON="${PYTHON:-python3}"
START_TRIES="${TANDEM_DB_START_TRIES:-150}" # x 0.2 s

log() { echo "db.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

usage() {
    sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

cmd_install() {
    if [[ ! -x "$VENV/bin/python" ]]; then
        log "creating virtualenv $VENV"
        "$PYTHON" -m venv "$VENV"
    fi
    local have=""
    have="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("SecantusDB"))' 2>/dev/null || true)"
    if [[ "$have" == "$SECANTUS_VERSION" && -x "$VENV/bin/secantusd-py" ]]; then
        log "SecantusDB $SECANTUS_VERSION already installed"
        return 0
    fi
    log "installing SecantusDB==$SECANTUS_VERSION into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "SecantusDB==$SECANTUS_VERSION" >&2
}

# Whether the recorded pid names a live process.
recorded_pid_alive() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

free_port() {
    "$PYTHON" - <<'PY'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

# Succeeds once the server answers a `ping` over the wire protocol.
ping_server() {
    local port="$1"
    "$VENV/bin/python" - "$port" <<'PY' >/dev/null 2>&1
import sys
from pymongo import MongoClient
c = MongoClient("127.0.0.1", int(sys.argv[1]), directConnection=True,
                serverSelectionTimeoutMS=500, connectTimeoutMS=500)
c.admin.command("ping")
PY
}

cmd_start() {
    local storage=":memory:"
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --storage-path)
                [[ $# -ge 2 ]] || die "--storage-path needs a directory"
                storage="$2"
                shift 2
                ;;
            --storage-path=*)
                storage="${1#--storage-path=}"
                shift
                ;;
            *) die "unknown option for start: $1" ;;
        esac
    done
    [[ -x "$VENV/bin/secantusd-py" ]] || die "SecantusDB is not installed; run: scripts/db.sh install"
    mkdir -p "$STATE"
    if recorded_pid_alive; then
        die "a server is already running (pid $(cat "$PID_FILE")); run: scripts/db.sh stop"
    fi

    local port logfile pid tries=0
    port="$(free_port)"
    logfile="$STATE/secantus-$port.log"
    log "starting secantusd-py on 127.0.0.1:$port (storage $storage, log $logfile)"
    # setsid: the server gets its own process group, so it outlives neither
    # `stop` nor this shell's job control quirks.
    setsid "$VENV/bin/secantusd-py" --host 127.0.0.1 --port "$port" \
        --storage-path "$storage" --enable-test-commands \
        </dev/null >"$logfile" 2>&1 &
    pid=$!
    echo "$pid" >"$PID_FILE"
    echo "$port" >"$PORT_FILE"

    until ping_server "$port"; do
        tries=$((tries + 1))
        if ! kill -0 "$pid" 2>/dev/null; then
            log "the server exited during start-up; last lines of $logfile:"
            tail -n 30 "$logfile" >&2 || true
            rm -f "$PID_FILE" "$PORT_FILE"
            exit 1
        fi
        if [[ $tries -ge $START_TRIES ]]; then
            log "the server did not accept connections after $tries tries; last lines of $logfile:"
            tail -n 30 "$logfile" >&2 || true
            cmd_stop
            exit 1
        fi
        sleep 0.2
    done
    log "server ready (pid $pid)"
    echo "mongodb://127.0.0.1:$port/"
}

cmd_stop() {
    if [[ ! -f "$PID_FILE" ]]; then
        log "no server recorded; nothing to stop"
        return 0
    fi
    local pid i
    pid="$(cat "$PID_FILE")"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        log "stopping server (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "server did not stop on SIGTERM; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
        fi
        if kill -0 "$pid" 2>/dev/null; then
            die "server (pid $pid) is still running"
        fi
    else
        log "recorded server (pid $pid) is not running"
    fi
    rm -f "$PID_FILE" "$PORT_FILE"
}

cmd_status() {
    if recorded_pid_alive; then
        echo "running: pid $(cat "$PID_FILE"), mongodb://127.0.0.1:$(cat "$PORT_FILE" 2>/dev/null || echo '?')/"
    else
        echo "not running"
        return 1
    fi
}

main() {
    [[ $# -ge 1 ]] || {
        usage
        exit 2
    }
    local cmd="$1"
    shift
    case "$cmd" in
        install) cmd_install "$@" ;;
        start) cmd_start "$@" ;;
        stop) cmd_stop "$@" ;;
        status) cmd_status "$@" ;;
        -h | --help | help) usage ;;
        *)
            usage
            exit 2
            ;;
    esac
}

main "$@"
