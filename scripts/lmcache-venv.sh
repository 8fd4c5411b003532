#!/usr/bin/env bash
# Creates (or reuses) the cached virtualenv in which the LMCache plugin tests run, then builds the
# `kvtier` Python wheel (python/, PyO3 + maturin) and installs it into that venv.
#
# Usage: scripts/lmcache-venv.sh [--deps-only]
#   Prints the venv's directory on stdout as its last line. --deps-only skips the wheel.
#
# The venv lives under $KVTIER_TOOLS_DIR (default ~/.cache/kvtier-tools)/lmcache-venv, outside the
# work tree, so fresh clones and CI runs on the same machine reuse it. It holds lmcache==0.5.6, a
# torch from PyPI (used on CPU only), pytest and maturin. A marker file records the versions; the
# install runs again only when they change (the first time: about 3 minutes and 6 GB, mostly torch).
# The wheel is built with its own cargo target directory (target/maturin), so it never invalidates
# the artifacts of the workspace's normal `cargo build` / `cargo test`. It is a debug build by
# default (the tests need no speed, and CI has no time for a second release build of the AWS and
# Xet stacks); KVTIER_WHEEL_PROFILE=release builds the wheel for real use.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="${KVTIER_TOOLS_DIR:-$HOME/.cache/kvtier-tools}"
VENV="$TOOLS/lmcache-venv"
PYTHON="${KVTIER_PYTHON:-python3}"
LMCACHE_VERSION=0.5.6
MATURIN_VERSION=1.16.0
PYTEST_VERSION=8.4.2
MARKER_TEXT="lmcache==$LMCACHE_VERSION torch maturin==$MATURIN_VERSION pytest==$PYTEST_VERSION python=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

mkdir -p "$TOOLS"
if [ "$(cat "$VENV/.kvtier-marker" 2>/dev/null || true)" != "$MARKER_TEXT" ]; then
    echo "==> lmcache venv: installing into $VENV ($MARKER_TEXT)" >&2
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip >&2
    "$VENV/bin/pip" install --quiet --no-cache-dir "lmcache==$LMCACHE_VERSION" torch \
        "maturin==$MATURIN_VERSION" "pytest==$PYTEST_VERSION" >&2
    echo "$MARKER_TEXT" > "$VENV/.kvtier-marker"
else
    echo "==> lmcache venv: reusing $VENV" >&2
fi

if [ "${1:-}" != "--deps-only" ]; then
    echo "==> kvtier wheel: maturin build (target/maturin)" >&2
    rm -rf target/wheels-plugin
    CARGO_TARGET_DIR="$PWD/target/maturin" "$VENV/bin/maturin" build \
        --profile "${KVTIER_WHEEL_PROFILE:-dev}" --manifest-path python/Cargo.toml \
        --interpreter "$VENV/bin/python" --out target/wheels-plugin >&2
    "$VENV/bin/pip" install --quiet --force-reinstall --no-deps target/wheels-plugin/kvtier-*.whl >&2
fi
echo "$VENV"
