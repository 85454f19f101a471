#!/usr/bin/env bash
# The bank test: concurrent transfers in worker processes under a nemesis
# (killed workers, a killed and restarted server, failCommand failpoints,
# paused workers), then recovery to quiescence and the checks.
#
#   bash scripts/bank.sh [flags]        e.g. bash scripts/bank.sh --duration 45s
#
# Installs the SecantusDB test server into .venv if needed (scripts/db.sh
# install; it is idempotent), then runs
#   cargo run --release -p tandem-bank -- [flags]
# which starts and stops its own server on a free loopback port (or uses the
# server at MONGODB_URI, skipping the server-kill nemesis). `--help` lists the
# flags. Exits with the test's status: 0 when every check held.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ -z "${MONGODB_URI:-}" ]]; then
    scripts/db.sh install
fi
exec cargo run --release -p tandem-bank -- "$@"
