#!/usr/bin/env bash
# The project's benchmark command.
#
#   bash scripts/bench.sh [--quick] [--proxy-delay DELAY]
#
# Installs what it needs (SecantusDB into .venv via scripts/db.sh install; Fawn
# 2.1.5 and the mongoose it depends on into bench/fawn/, which ignores itself),
# builds tandem-bench in release mode (timed separately), starts one SecantusDB
# server on a free loopback port, runs the benchmark against it, stops the
# server whatever happens, and writes the report to target/bench-report.md
# (also printed). --quick runs fewer transfers (under two minutes once built).
# --proxy-delay DELAY (e.g. 1ms) runs the same table with every client connected
# through a proxy on 127.0.0.1 that delays each request by DELAY, one simulated
# network round trip per request; that report goes to target/bench-report-proxy.md.
# Without node and npm, the Fawn variant is left out and the report says so.
# The last line of output is the summary scripts parse:
#   bench: rt_commit=R writes_per_transfer=W latency_vs_native=L
#          throughput_vs_fawn@16=F throughput_vs_handwritten@16=H embedded_2pc_per_s=E
# (one line; `na` for a figure that was not measured).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

FAWN_VERSION="2.1.5"
MONGOOSE_VERSION="4.12.3" # the exact version fawn 2.1.5 depends on
FAWN_DIR="$ROOT/bench/fawn"
REPORT="$ROOT/target/bench-report.md"
SUMMARY="$ROOT/target/bench-summary.txt"

say() { echo "bench.sh: $*" >&2; }

quick=()
proxy=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) quick=(--quick) ;;
        --proxy-delay)
            [[ $# -ge 2 ]] || {
                say "--proxy-delay needs a delay, e.g. 1ms"
                exit 2
            }
            proxy=(--proxy-delay "$2")
            shift
            ;;
        --proxy-delay=*) proxy=(--proxy-delay "${1#--proxy-delay=}") ;;
        -h | --help)
            sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
            exit 0
            ;;
        *)
            say "unknown argument: $1"
            exit 2
            ;;
    esac
    shift
done
if [[ ${#proxy[@]} -gt 0 ]]; then
    REPORT="$ROOT/target/bench-report-proxy.md"
    SUMMARY="$ROOT/target/bench-summary-proxy.txt"
fi

# --- installs ---------------------------------------------------------------
say "installing the server"
scripts/db.sh install

fawn_args=()
installed_fawn() {
    node -e "process.stdout.write(require('$FAWN_DIR/node_modules/fawn/package.json').version)" 2>/dev/null || true
}
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    mkdir -p "$FAWN_DIR"
    # Everything in bench/fawn/ is installed here: keep it out of git.
    printf '*\n' >"$FAWN_DIR/.gitignore"
    [[ -f "$FAWN_DIR/package.json" ]] || printf '{ "private": true }\n' >"$FAWN_DIR/package.json"
    if [[ "$(installed_fawn)" != "$FAWN_VERSION" ]]; then
        say "installing fawn@$FAWN_VERSION and mongoose@$MONGOOSE_VERSION into bench/fawn"
        (cd "$FAWN_DIR" && npm install --no-audit --no-fund --loglevel=error \
            "fawn@$FAWN_VERSION" "mongoose@$MONGOOSE_VERSION" >&2)
    else
        say "fawn@$FAWN_VERSION already installed"
    fi
    fawn_args=(--fawn-modules "$FAWN_DIR/node_modules" --node "$(command -v node)")
else
    say "node or npm not found: the Fawn variant is left out"
fi

# --- build (timed on its own) -----------------------------------------------
say "building tandem-bench (release)"
build_start=$SECONDS
cargo build --release -p tandem-bench --bins
build_secs=$((SECONDS - build_start))
say "build took ${build_secs} s"
# The binary just built, run as it is: `cargo run` would rebuild it first if a
# source changed in the meantime, and time that build as part of the run.
TARGET_DIR="$(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
BENCH_BIN="$TARGET_DIR/release/tandem-bench"

# --- server -----------------------------------------------------------------
TANDEM_DB_STATE_DIR="$ROOT/.tandem-test/bench-$$"
export TANDEM_DB_STATE_DIR
cleanup() {
    say "stopping the server"
    scripts/db.sh stop || true
    rm -rf -- "$TANDEM_DB_STATE_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

say "starting the server"
URI="$(scripts/db.sh start)"
say "server at $URI"
secantus="$(grep -o 'SECANTUS_VERSION="[^"]*"' scripts/db.sh | cut -d'"' -f2)"

# --- run --------------------------------------------------------------------
run_start=$SECONDS
"$BENCH_BIN" \
    --uri "$URI" "${quick[@]}" "${proxy[@]}" "${fawn_args[@]}" \
    --server "SecantusDB ${secantus} (a Python server), in-memory storage" \
    --build-time "${build_secs} s (cargo build --release -p tandem-bench --bins)" \
    --out "$REPORT" --summary "$SUMMARY"
say "benchmark took $((SECONDS - run_start)) s after a ${build_secs} s build; report in ${REPORT#"$ROOT"/}"
# Stop the server now, so that the summary is the last line of the output.
trap - EXIT
cleanup
cat "$SUMMARY"
