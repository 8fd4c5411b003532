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

GARAGE_VERSION=2.5.0
GARAGE_ROOT="$KVTIER_TOOLS_DIR/garage-$GARAGE_VERSION"

# Disk: a cold target/ grows to about 8 GB (debug builds without dependencies' debug info, see
# [profile.dev] in Cargo.toml). The first run also installs the tools: the LMCache venv, about
# 7 GB (mostly torch; the 0.5.7rc2 overlay on it adds about 0.1 GB), and Garage, whose build
# takes a few GB in a temp dir. Print what is free and warn up front, rather than let a linker
# fail with "No space left on device" minutes in.
free_gb() { df -Pk "$1" 2>/dev/null | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
mkdir -p "$TARGET_DIR"
NEED_GB=9
if [ ! -f "$KVTIER_TOOLS_DIR/lmcache-venv/.kvtier-marker" ] || [ ! -x "$GARAGE_ROOT/bin/garage" ]; then
    NEED_GB=20
fi
HAVE_GB="$(free_gb "$TARGET_DIR")"
step "disk: ${HAVE_GB:-?} GB free under $TARGET_DIR; this run needs about $NEED_GB GB"
if [ -n "$HAVE_GB" ] && [ "$HAVE_GB" -lt "$NEED_GB" ]; then
    printf 'warning: only %s GB free under %s, and this run needs about %s GB; builds may fail with "No space left on device"\n' \
        "$HAVE_GB" "$TARGET_DIR" "$NEED_GB" >&2
fi

# Garage: the S3 server the S3 tests start (tests/support/garage.rs). Built once, ~10 minutes.
if [ ! -x "$GARAGE_ROOT/bin/garage" ]; then
    step "install Garage $GARAGE_VERSION into $GARAGE_ROOT (once)"
    cargo install "garage@$GARAGE_VERSION" --locked --root "$GARAGE_ROOT"
fi
export KVTIER_GARAGE_BIN="$GARAGE_ROOT/bin/garage"

# redis-server: the fleet index's tests start it on 127.0.0.1 (actors/src/fleet/tests/).
# Debian's package; KVTIER_REDIS_SERVER names another binary.
if [ -z "${KVTIER_REDIS_SERVER:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
    step "install redis-server (Debian's package, once)"
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server
fi

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

step "examples/serving: a scheduler and engine workers on the embedded default (exits 1 on a wrong byte)"
cargo run --example serving -- --requests 200

step "tests, minimal runtime (an s3/hfbucket adapter is a named config error)"
cargo test -p kvtier --no-default-features --test config

step "LMCache plugin: venv (lmcache 0.5.6, torch CPU; cached), kvtier wheel"
# python/tests starts its own Garage (KVTIER_GARAGE_BIN) and Hub emulator (built here).
cargo build --example hub_emulator
LMCACHE_VENV="$(scripts/lmcache-venv.sh)"
# 0.5.7rc2: an overlay on that venv holding only what 0.5.6's lacks (lmcache itself, ~100 MB,
# seconds), so torch is installed once; the wheel is abi3 and serves both (scripts/lmcache-venv.sh).
LMCACHE_057="$(scripts/lmcache-venv.sh --deps-only --lmcache 0.5.7rc2)"

# The whole plugin suite on each supported LMCache; both run even if the first fails.
PLUGIN_FAILED=""
for env in "0.5.6:$LMCACHE_VENV" "0.5.7rc2:$LMCACHE_057"; do
    version="${env%%:*}"
    step "LMCache plugin: pytest on lmcache $version"
    "${env#*:}/bin/python" -m pytest python/tests -q -p no:cacheprovider \
        -W ignore::FutureWarning -W ignore::DeprecationWarning || PLUGIN_FAILED="$PLUGIN_FAILED $version"
done
if [ -n "$PLUGIN_FAILED" ]; then
    echo "LMCache plugin suite failed on lmcache$PLUGIN_FAILED" >&2
    exit 1
fi
