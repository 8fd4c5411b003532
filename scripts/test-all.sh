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

# Garage: the S3 server the S3 tests start (tests/support/garage.rs). Built once, ~10 minutes.
GARAGE_VERSION=2.5.0
GARAGE_ROOT="$KVTIER_TOOLS_DIR/garage-$GARAGE_VERSION"
if [ ! -x "$GARAGE_ROOT/bin/garage" ]; then
    step "install Garage $GARAGE_VERSION into $GARAGE_ROOT (once)"
    cargo install "garage@$GARAGE_VERSION" --locked --root "$GARAGE_ROOT"
fi
export KVTIER_GARAGE_BIN="$GARAGE_ROOT/bin/garage"

step "rustfmt"
cargo fmt --all -- --check

step "clippy (-D warnings)"
cargo clippy --workspace --all-targets -- -D warnings

step "clippy, minimal runtime: fs + memory, no s3/hfbucket (--no-default-features)"
cargo clippy --workspace --all-targets --no-default-features -- -D warnings

step "rustdoc (-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace

step "tests"
cargo test --workspace --no-fail-fast

step "tests, minimal runtime (an s3/hfbucket adapter is a named config error)"
cargo test --no-default-features --test config

step "LMCache plugin: venv (lmcache 0.5.6, torch CPU; cached), kvtier wheel, pytest"
# python/tests starts its own Garage (KVTIER_GARAGE_BIN) and Hub emulator (built here).
cargo build --example hub_emulator
LMCACHE_VENV="$(scripts/lmcache-venv.sh)"
"$LMCACHE_VENV/bin/python" -m pytest python/tests -q -p no:cacheprovider \
    -W ignore::FutureWarning -W ignore::DeprecationWarning
