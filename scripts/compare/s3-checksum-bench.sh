#!/bin/sh
# The cost of s3_checksum (docs/benchmarks.md, "Integrity checks on loads"): 3 alternating rounds of
# three variants of the adapter in $KVTIER_S3_ADAPTER, one `kvtier bench` each, with the client's
# CPU time. Run it through scripts/garage-local.sh:
#   scripts/garage-local.sh scripts/compare/s3-checksum-bench.sh
# Env: KVBIN (default target/release/kvtier), CHUNKS (256), SIZE (4MiB).
B=${KVBIN:-target/release/kvtier}
OUT=${TMPDIR:-/tmp}/kvtier-checksum-bench.json
TIME=${TMPDIR:-/tmp}/kvtier-checksum-bench-time
for round in 1 2 3; do
  for v in none-unsigned none-auto crc32c; do
    case $v in
      none-unsigned) extra='{"s3_checksum":"none","s3_payload_signing":"unsigned"}';;
      none-auto) extra='{"s3_checksum":"none"}';;
      crc32c) extra='{"s3_checksum":"crc32c"}';;
    esac
    A=$(python3 -c "import json,sys; a=json.loads(sys.argv[1]); a.update(json.loads(sys.argv[2])); print(json.dumps(a))" "$KVTIER_S3_ADAPTER" "$extra")
    /usr/bin/time -f "cpu %U %S" -o "$TIME" "$B" bench --l2-adapter "$A" --chunks ${CHUNKS:-256} --chunk-size ${SIZE:-4MiB} --no-baseline --cleanup --json > "$OUT" 2>/dev/null
    python3 - "$round" "$v" "$OUT" "$TIME" <<'PY'
import json,sys
j=json.load(open(sys.argv[3]))
cpu=open(sys.argv[4]).read().split()
print(sys.argv[1], sys.argv[2], "store_gbps=%.3f load_gbps=%.3f verified=%s errors=%s cpu_s=%.2f checksum=%s" % (j['store_gbps'], j['load_gbps'], j['verified'], j['errors'], float(cpu[-2])+float(cpu[-1]), json.dumps(j['status'])[:0] + str([a.get('details',{}).get('checksum') for a in (j['status'] if isinstance(j['status'], list) else j['status'].get('adapters', []))])), flush=True)
PY
  done
done
