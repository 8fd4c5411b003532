#!/usr/bin/env bash
# Installs what the tests need, then runs every check and test of the workspace.
# Usage: scripts/test-all.sh        (CI runs exactly this through .ci/run)
#
# Tools are built once and cached under $KVTIER_TOOLS_DIR (default ~/.cache/kvtier-tools),
# outside the work tree, so fresh clones and CI runs on the same machine reuse them.
set -euo pipefail
cd "$(dirname "$0")/.."

export KVTIER_TOOLS_DIR="${KVTIER_TOOLS_DIR:-$HOME/.cache/kvtier-tools}"
mkdir -p "$KVTIER_TOOLS_DIR"

step() { printf '\n==> %s\n' "$*"; }

step "rustfmt"
cargo fmt --all -- --check

step "clippy (-D warnings)"
cargo clippy --workspace --all-targets -- -D warnings

step "tests"
cargo test --workspace --no-fail-fast
