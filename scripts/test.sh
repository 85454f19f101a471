#!/usr/bin/env bash
# The project's test command.
#
# Runs every test of the workspace against a MongoDB-compatible server:
#   - MONGODB_URI set: that server is used as it is;
#   - otherwise a throwaway SecantusDB server is installed (scripts/db.sh install),
#     started (scripts/db.sh start) and stopped again when this script exits,
#     whatever the outcome. Its log stays in .tandem-test/run-PID/ when tests fail.
# Exports MONGODB_URI and TANDEM_REQUIRE_MONGODB=1 (tests fail rather than skip
# without a server), runs `cargo test --workspace --all-targets` and then
# `cargo test --workspace --doc`, and exits with the first failing status.
# Extra arguments are passed to both cargo test runs (e.g. `-- --nocapture`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { echo "test.sh: $*" >&2; }

status=1
cleanup() {
    say "stopping the test server"
    scripts/db.sh stop || true
    if [[ $status -eq 0 ]]; then
        rm -rf -- "$TANDEM_DB_STATE_DIR"
    else
        say "server log kept in $TANDEM_DB_STATE_DIR"
    fi
}

if [[ -n "${MONGODB_URI:-}" ]]; then
    say "using the server at MONGODB_URI"
else
    say "installing the test server"
    scripts/db.sh install
    # A state directory of this run's own: concurrent runs each get their server.
    TANDEM_DB_STATE_DIR="$ROOT/.tandem-test/run-$$"
    export TANDEM_DB_STATE_DIR
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM HUP
    say "starting the test server"
    MONGODB_URI="$(scripts/db.sh start)"
    say "test server at $MONGODB_URI"
fi
export MONGODB_URI
export TANDEM_REQUIRE_MONGODB=1

status=0
# tests-integration/tests/examples.rs runs the examples' own binaries, which `cargo test` builds only as test harnesses.
say "cargo build --workspace --examples"
cargo build --workspace --examples

say "cargo test --workspace --all-targets --no-fail-fast"
cargo test --workspace --all-targets --no-fail-fast "$@" || status=$?
say "cargo test --workspace --doc --no-fail-fast"
doc_status=0
cargo test --workspace --doc --no-fail-fast "$@" || doc_status=$?
if [[ $status -eq 0 ]]; then
    status=$doc_status
fi

if [[ $status -eq 0 ]]; then
    say "all tests passed"
else
    say "tests failed (exit status $status)"
fi
exit "$status"
