#!/usr/bin/env bash
# perf profile of the kvtier plugin's hfbucket store phase only (scripts/compare/store_only.py), against a
# fresh release Hub emulator. Usage: scripts/compare/profile_hf_store.sh SITE OUT.perf [store_only.py args]
#   SITE: a `pip install --target` of a kvtier wheel (release); OUT.perf: perf's output file.
#   PERF_OPTS (default "-F 299 --call-graph dwarf,32768"); KVTIER_HUB_EMULATOR_BIN (default
#   target/release/examples/hub_emulator).
set -euo pipefail
cd "$(dirname "$0")/../.."
SITE=$(realpath "$1"); OUT=$(realpath -m "$2"); shift 2
V="${KVTIER_TOOLS_DIR:-$HOME/.cache/kvtier-tools}/lmcache-venv"
D=$(mktemp -d); trap 'kill $EMU 2>/dev/null; rm -rf "$D"' EXIT
mkfifo "$D/ctl" "$D/ack"
"${KVTIER_HUB_EMULATOR_BIN:-target/release/examples/hub_emulator}" --port 0 --token hf_kvtier_bench_token > "$D/endpoint" 2>/dev/null &
EMU=$!
until [ -s "$D/endpoint" ]; do sleep 0.1; done
EP=$(head -1 "$D/endpoint")
SPEC=$(python3 -c "import json,sys; print(json.dumps({'type':'plugin','module_path':'kvtier.lmcache','class_name':'KvtierL2Adapter','adapter_params':{'type':'hfbucket','bucket_handle':'hf://buckets/kvtier/bench','hf_endpoint':sys.argv[1],'token':'hf_kvtier_bench_token','create_bucket_if_missing':True}}))" "$EP")
PERF_CTL="$D/ctl" PERF_ACK="$D/ack" HF_ENDPOINT=$EP PYTHONPATH=$SITE \
  perf record ${PERF_OPTS:--F 299 --call-graph dwarf,32768} -D -1 --control="fifo:$D/ctl,$D/ack" -o "$OUT" -- \
  "$V/bin/python" scripts/compare/store_only.py --spec "$SPEC" "$@"
