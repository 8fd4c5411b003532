#!/usr/bin/env bash
# Compares kvtier's S3 pipeline with a raw aws-sdk-s3 loop and LMCache's awscrt data path, in
# alternating rounds, each run against a fresh throwaway Garage node on 127.0.0.1 (see
# scripts/compare/compare.py).
#
# Usage: scripts/compare/compare.sh [compare.py options]
#   e.g. scripts/compare/compare.sh --rounds 5 --workload 256x4MiB@16 --variant crc32c='{"s3_checksum": "crc32c"}'
#   or, LMCache's own s3 adapter vs kvtier through its LMCache plugin (needs the lmcache venv of
#   scripts/lmcache-venv.sh with a release kvtier wheel importable, e.g. via PYTHONPATH):
#   scripts/compare/compare.sh --clients lmcache-s3,kvtier-lmcache
# Env: KVTIER_BIN (use this kvtier binary), KVTIER_GARAGE_PORT (default 3960), TMPDIR (where each
# run's Garage keeps its data: 1 GiB per run at the default workloads; /dev/shm keeps disk I/O of
# a busy machine out of the figures).
# Needs Garage (scripts/test-all.sh installs it once) and installs awscrt into a cached venv.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOOLS="${KVTIER_TOOLS_DIR:-$HOME/.cache/kvtier-tools}"
VENV="$TOOLS/peer-venv"
AWSCRT_VERSION="${KVTIER_AWSCRT_VERSION:-0.38.1}"
if ! "$VENV/bin/python" -c "import awscrt.s3" 2>/dev/null; then
  echo "installing awscrt $AWSCRT_VERSION into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "awscrt==$AWSCRT_VERSION"
fi
# The kvtier binary is needed unless only LMCache-driven clients run (--clients without kvtier
# or raw, and no --variant / --binary).
needs_binary=1
prev=
for a in "$@"; do
  case "$prev" in --clients) case ",$a," in *,kvtier,*|*,raw,*) ;; *) needs_binary=0 ;; esac ;; esac
  prev=$a
done
for a in "$@"; do case "$a" in --variant|--binary|--variant=*|--binary=*) needs_binary=1 ;; esac; done
if [ "$needs_binary" = 0 ] && [ -z "${KVTIER_BIN:-}" ]; then
  KVTIER_BIN=/nonexistent
elif [ -z "${KVTIER_BIN:-}" ]; then
  cargo build --release --bin kvtier >&2
  KVTIER_BIN=target/release/kvtier
fi
exec "$VENV/bin/python" scripts/compare/compare.py --kvtier "$KVTIER_BIN" --python "$VENV/bin/python" "$@"
