#!/usr/bin/env bash
# Builds the guide in book/ with mdBook, installing mdBook first if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION="0.4.52"
if ! command -v mdbook >/dev/null 2>&1; then
  echo "book: installing mdbook ${MDBOOK_VERSION} (cargo install, about two minutes)"
  cargo install mdbook --version "${MDBOOK_VERSION}" --locked --quiet
fi
echo "book: $(mdbook --version)"
mdbook build book
