#!/usr/bin/env bash
# Starts a throwaway single-node Garage S3 server on 127.0.0.1 for manual runs and benchmarks,
# creates the bucket `kvtier-bench`, prints an --l2-adapter JSON for it, and stops the server
# (and removes its directory) when the given command exits.
#
# Usage: scripts/garage-local.sh [command ...]
#   e.g. scripts/garage-local.sh sh -c 'target/release/kvtier bench --l2-adapter "$KVTIER_S3_ADAPTER"'
# Without a command it prints the JSON and waits for Ctrl-C. The command sees the adapter JSON in
# $KVTIER_S3_ADAPTER and the server's process id in $KVTIER_GARAGE_PID.
# Env: KVTIER_GARAGE_PORT (default 3900), KVTIER_GARAGE_BUCKET (default kvtier-bench),
# KVTIER_GARAGE_ROOT_DOMAIN (virtual-host suffix, default .s3.garage.localhost; with ".0.0.1" and
# the bucket "127", `Host: 127.0.0.1:<port>` addresses the bucket, which is how LMCache's own `s3`
# adapter, virtual-host only, reaches it; path-style clients then use localhost:<port>).
set -euo pipefail
TOOLS="${KVTIER_TOOLS_DIR:-$HOME/.cache/kvtier-tools}"
BIN="${KVTIER_GARAGE_BIN:-$TOOLS/garage-2.5.0/bin/garage}"
[ -x "$BIN" ] || { echo "garage not found at $BIN: run scripts/test-all.sh once (it installs it)" >&2; exit 2; }
PORT="${KVTIER_GARAGE_PORT:-3900}"
BUCKET="${KVTIER_GARAGE_BUCKET:-kvtier-bench}"
ROOT_DOMAIN="${KVTIER_GARAGE_ROOT_DOMAIN:-.s3.garage.localhost}"
DIR="$(mktemp -d -t kvtier-garage-XXXXXX)"
KEY_ID=GK6b76746965722d62656e6368212121
SECRET=6b76746965722d62656e63682d7365637265742d6b65792d666f722d6761726167
cat > "$DIR/garage.toml" <<TOML
metadata_dir = "$DIR/meta"
data_dir = "$DIR/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$((PORT + 1))"
rpc_public_addr = "127.0.0.1:$((PORT + 1))"
rpc_secret = "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
[s3_api]
api_bind_addr = "127.0.0.1:$PORT"
s3_region = "garage"
root_domain = "$ROOT_DOMAIN"
TOML
GARAGE_DEFAULT_ACCESS_KEY=$KEY_ID GARAGE_DEFAULT_SECRET_KEY=$SECRET \
  "$BIN" -c "$DIR/garage.toml" server --single-node --default-access-key > "$DIR/garage.log" 2>&1 &
PID=$!
cleanup() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
for _ in $(seq 1 100); do
  "$BIN" -c "$DIR/garage.toml" bucket create "$BUCKET" >/dev/null 2>&1 && break
  sleep 0.1
done
"$BIN" -c "$DIR/garage.toml" bucket allow --read --write --owner "$BUCKET" --key "$KEY_ID" >/dev/null
export KVTIER_S3_ADAPTER="{\"type\": \"s3\", \"s3_endpoint\": \"http://127.0.0.1:$PORT\", \"s3_bucket\": \"$BUCKET\", \"s3_region\": \"garage\", \"disable_tls\": true, \"aws_access_key_id\": \"$KEY_ID\", \"aws_secret_access_key\": \"$SECRET\"}"
export KVTIER_GARAGE_PID=$PID
echo "garage pid $PID on 127.0.0.1:$PORT (dir $DIR)" >&2
echo "KVTIER_S3_ADAPTER=$KVTIER_S3_ADAPTER" >&2
if [ $# -gt 0 ]; then "$@"; else wait "$PID"; fi
