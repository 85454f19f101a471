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
# install; it is idempotent), then runs
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
exec cargo run --release -p tandem-bank -- "$@"
