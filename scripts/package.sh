#!/usr/bin/env bash
# Packages the crates meant for crates.io and builds each from its package
# alone, as `cargo publish` would: tandem-2pc-macros, tandem-2pc,
# tandem-2pc-mongodb and tandem-2pc-cli. Cargo verifies them in dependency
# order against a local registry of the packages just made, so nothing needs
# to be published first; it only reads the crates.io index. The packages are
# left in target/package/. Extra arguments go to `cargo package` (e.g.
# `--list`, `--no-verify`).
#
# Also checks that every published crate carries the license files of the
# root (copies, not links: a package holds the files themselves).
set -euo pipefail
cd "$(dirname "$0")/.."

# crate directory -> package name
crates=(tandem-macros:tandem-2pc-macros tandem:tandem-2pc tandem-mongodb:tandem-2pc-mongodb tandem-cli:tandem-2pc-cli)

status=0
packages=()
for entry in "${crates[@]}"; do
    dir="crates/${entry%%:*}"
    packages+=(-p "${entry#*:}")
    for file in LICENSE-MIT LICENSE-APACHE; do
        if [[ -L "$dir/$file" ]] || ! cmp -s "$file" "$dir/$file"; then
            echo "package.sh: $dir/$file is not a copy of $file (cp $file $dir/)" >&2
            status=1
        fi
    done
done
if [[ $status -ne 0 ]]; then
    exit "$status"
fi

# cargo package unpacks the packages it has just made into
# $CARGO_HOME/registry/src/-<hash>/ (a local registry named after this
# checkout's path) to verify the ones that depend on them, and never unpacks
# the same version there again: a second run from the same path would verify
# against the first run's sources. Remove earlier copies first.
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
rm -rf "$cargo_home"/registry/src/-*/tandem-2pc-* "$cargo_home"/registry/cache/-*/tandem-2pc-*

# --allow-dirty: what is checked is the packages, not whether the work tree
# is committed (a developer runs this before committing).
cargo package --allow-dirty "${packages[@]}" "$@"
