#!/usr/bin/env bash
# The bank test: concurrent transactions in worker processes over two servers
# (transfers, payments, payouts, voucher issues and redeems that delete and
# re-create the same _ids, a fee account every transaction touches) under a
# nemesis (killed workers, either server killed and restarted, failCommand
# failpoints, paused workers, delayed writes) and concurrent garbage
# collection of records, then recovery to quiescence and the checks.
#
#   bash scripts/bank.sh [flags]        e.g. bash scripts/bank.sh --duration 45s
#
# Installs the SecantusDB test server into .venv if needed (scripts/db.sh
# install; it is idempotent), and libfaketime when --clock-skew asks for it,
# then runs
#   cargo run --release -p tandem-bank -- [flags]
# which starts and stops its own two servers on free loopback ports (or uses the
# server at MONGODB_URI for both stores, skipping the server-kill nemesis).
# `--help` lists the flags. The last line reads
#   bank: N transfers, C committed, X canceled, F faults, V violations, hot document peak B bytes, G records collected
# Exits with the test's status: 0 when every check held.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ -z "${MONGODB_URI:-}" ]]; then
    scripts/db.sh install
fi

# --clock-skew D runs server 2 under libfaketime (Debian's faketime package):
# install it when it is missing. If it cannot be installed, the run goes on
# without the clock nemesis and says so.
args=("$@")
skew=""
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
        --clock-skew) skew="${args[i + 1]:-}" ;;
        --clock-skew=*) skew="${args[i]#--clock-skew=}" ;;
    esac
done
LIBFAKETIME="${TANDEM_LIBFAKETIME:-/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1}"
if [[ -n "$skew" && ! "$skew" =~ ^0+(\.0*)?(ms|s|m|h)?$ && -z "${MONGODB_URI:-}" && ! -f "$LIBFAKETIME" ]]; then
    echo "bank.sh: installing libfaketime (Debian package faketime) for --clock-skew" >&2
    sudo=""
    [[ "$(id -u)" -eq 0 ]] || sudo="sudo"
    $sudo apt-get install -y -q faketime >&2 ||
        { $sudo apt-get update -q >&2 && $sudo apt-get install -y -q faketime >&2; } ||
        true
    if [[ ! -f "$LIBFAKETIME" ]]; then
        echo "bank.sh: WARNING: libfaketime could not be installed at $LIBFAKETIME; running WITHOUT the clock nemesis" >&2
        filtered=()
        for ((i = 0; i < ${#args[@]}; i++)); do
            case "${args[i]}" in
                --clock-skew) i=$((i + 1)) ;;
                --clock-skew=*) ;;
                *) filtered+=("${args[i]}") ;;
            esac
        done
        args=("${filtered[@]}")
    fi
fi
exec cargo run --release -p tandem-bank -- "${args[@]}"
