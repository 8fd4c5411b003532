#!/usr/bin/env bash
# Creates (or reuses) the cached Python environments in which the LMCache plugin tests run, then
# builds the `kvtier` Python wheel (python/, PyO3 + maturin) and installs it.
#
# Usage: scripts/lmcache-venv.sh [--deps-only] [--lmcache VERSION]
#   Prints an environment's directory on stdout as its last line: run `<dir>/bin/python`.
#   --deps-only  skips the wheel.
#   --lmcache V  the environment of LMCache V: the base venv for 0.5.6 (the default), an overlay
#                on it for another version in LMCACHE_OVERLAY_VERSIONS (0.5.7rc2).
#
# The base venv lives under $KVTIER_TOOLS_DIR (default ~/.cache/kvtier-tools)/lmcache-venv, outside
# the work tree, so fresh clones and CI runs on the same machine reuse it. It holds lmcache==0.5.6
# with every dependency it declares (CUDA ones included: they install from PyPI and are never
# loaded on CPU), a torch from PyPI (used on CPU only), pytest and maturin. A marker file records
# the versions; the install runs again only when they change (the first time: about 3 minutes and
# 6 GB, mostly torch). On CPU the plugin tests import far less than LMCache declares (torch,
# numba, awscrt, huggingface_hub, opentelemetry, pyzmq, nvtx, grpcio and google-cloud-bigtable,
# cuda-python's bindings; never cupy, cufile, redis, fastapi, safetensors), but installing it all
# keeps `pip check` clean and costs little beside torch, so nothing is left out by guesswork.
#
# Other LMCache versions are overlays, not venvs: $KVTIER_TOOLS_DIR/lmcache-<V>/site holds only
# what the base venv lacks for V, installed with `pip install --target DIR --no-deps`, and
# <dir>/bin/python runs the base venv's interpreter with PYTHONPATH=DIR first, so V's modules
# shadow 0.5.6's and everything else (torch, ~6 GB) comes from the base venv, installed once. What
# the overlay lacks is decided by pip's own resolver run against the base venv (`pip install
# --dry-run --report`): for 0.5.7rc2 that is lmcache alone (it declares the same dependencies as
# 0.5.6: about 85 MB, a few seconds). Why not a second venv: one with its own torch doubles CI's
# cold time and disk; one made with `--system-site-packages` cannot see another venv; one reading
# the base venv through a .pth file gets the base's lmcache *after* its own on sys.path only by
# the accident of path order, and pip in it would try to uninstall the base's lmcache. An
# overlay that would need its own torch is refused (bump the base venv's torch instead). The
# kvtier wheel is abi3 and lives in the base venv, so one build serves every version.
#
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
LMCACHE_OVERLAY_VERSIONS="0.5.7rc2"
MATURIN_VERSION=1.16.0
PYTEST_VERSION=8.4.2
MARKER_TEXT="lmcache==$LMCACHE_VERSION torch maturin==$MATURIN_VERSION pytest==$PYTEST_VERSION python=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

WANT="$LMCACHE_VERSION"
BUILD_WHEEL=1
while [ $# -gt 0 ]; do
    case "$1" in
        --deps-only) BUILD_WHEEL=0 ;;
        --lmcache) WANT="${2:?--lmcache needs a version}"; shift ;;
        *) echo "usage: $0 [--deps-only] [--lmcache VERSION]" >&2; exit 2 ;;
    esac
    shift
done
if [ "$WANT" != "$LMCACHE_VERSION" ] && ! [[ " $LMCACHE_OVERLAY_VERSIONS " == *" $WANT "* ]]; then
    echo "error: lmcache $WANT: this script knows $LMCACHE_VERSION and $LMCACHE_OVERLAY_VERSIONS" >&2
    exit 2
fi

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

if [ "$BUILD_WHEEL" = 1 ]; then
    echo "==> kvtier wheel: maturin build (target/maturin)" >&2
    rm -rf target/wheels-plugin
    CARGO_TARGET_DIR="$PWD/target/maturin" "$VENV/bin/maturin" build \
        --profile "${KVTIER_WHEEL_PROFILE:-dev}" --manifest-path python/Cargo.toml \
        --interpreter "$VENV/bin/python" --out target/wheels-plugin >&2
    "$VENV/bin/pip" install --quiet --force-reinstall --no-deps target/wheels-plugin/kvtier-*.whl >&2
fi

if [ "$WANT" = "$LMCACHE_VERSION" ]; then
    echo "$VENV"
    exit 0
fi

# An overlay on the base venv for lmcache $WANT (see the header).
OVERLAY="$TOOLS/lmcache-$WANT"
OVERLAY_MARKER="lmcache==$WANT overlay on: $MARKER_TEXT"
if [ "$(cat "$OVERLAY/.kvtier-marker" 2>/dev/null || true)" != "$OVERLAY_MARKER" ]; then
    echo "==> lmcache $WANT: installing an overlay on $VENV into $OVERLAY" >&2
    rm -rf "$OVERLAY"
    mkdir -p "$OVERLAY/bin"
    # What pip would install into the base venv for lmcache==$WANT: lmcache, plus any dependency
    # the base venv lacks or holds at a version $WANT does not accept.
    "$VENV/bin/pip" install --quiet --no-cache-dir --dry-run --report "$OVERLAY/plan.json" \
        "lmcache==$WANT" >&2
    mapfile -t PLAN < <("$VENV/bin/python" - "$OVERLAY/plan.json" <<'EOF'
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    print(f'{meta["name"]}=={meta["version"]}')
EOF
)
    echo "==> lmcache $WANT: the overlay needs ${PLAN[*]}" >&2
    for req in "${PLAN[@]}"; do
        case "${req,,}" in
            torch==*|nvidia-*)
                echo "error: lmcache $WANT needs $req, which the base venv does not have: an overlay would install a second torch; update the base venv instead" >&2
                exit 1 ;;
        esac
    done
    "$VENV/bin/pip" install --quiet --no-cache-dir --no-deps --target "$OVERLAY/site" "${PLAN[@]}" >&2
    cat > "$OVERLAY/bin/python" <<EOF
#!/bin/sh
# lmcache $WANT over the base venv $VENV (made by scripts/lmcache-venv.sh).
PYTHONPATH="$OVERLAY/site\${PYTHONPATH:+:\$PYTHONPATH}" exec "$VENV/bin/python" "\$@"
EOF
    chmod +x "$OVERLAY/bin/python"
    got="$("$OVERLAY/bin/python" -c 'import importlib.metadata as m, lmcache; print(m.version("lmcache"))')"
    if [ "$got" != "$WANT" ]; then
        echo "error: the overlay's python imports lmcache $got, not $WANT" >&2
        exit 1
    fi
    echo "$OVERLAY_MARKER" > "$OVERLAY/.kvtier-marker"
else
    echo "==> lmcache $WANT: reusing the overlay $OVERLAY" >&2
fi
echo "$OVERLAY"
