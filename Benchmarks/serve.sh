#!/usr/bin/env bash
# nginx vs `courier serve` serving the same 512 MiB file to curl, in the same run (release build).
# Prints each mean time and the throughput ratio courier/nginx (goal >= 0.8).
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
SIZE_MIB=${SIZE_MIB:-512}
# COURIER_BIN=path skips the release build (e.g. to measure another build).
if [ -z "${COURIER_BIN:-}" ]; then
  swift build -c release --static-swift-stdlib --product courier >&2
  BIN=$(swift build -c release --static-swift-stdlib --show-bin-path)/courier
else
  BIN=$COURIER_BIN
fi
WORK=$(mktemp -d /tmp/courier-bench-serve.XXXXXX)
SERVE_PID=""
cleanup() { [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null; [ -n "${NGINX_PID:-}" ] && kill "$NGINX_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

mkdir -p "$WORK/content/packages/com.example.big"
head -c "$((SIZE_MIB << 20))" /dev/urandom > "$WORK/big.zip"
SHA=$(sha256sum "$WORK/big.zip" | cut -d' ' -f1)
REL="packages/com.example.big/$SHA.zip"
mv "$WORK/big.zip" "$WORK/content/$REL"
cat > "$WORK/content/catalog.json" <<JSON
{"bundleId":"com.example.app","products":[{"productId":"com.example.big","content":{"url":"$REL","sha256":"$SHA","length":$((SIZE_MIB << 20)),"version":"1.0","placement":"documents"}}]}
JSON
cat "$WORK/content/$REL" > /dev/null   # warm the page cache for both servers

start_nginx "$WORK/content" "$WORK"
"$BIN" serve --content "$WORK/content" --port 0 --public --json > "$WORK/serve.log" 2>/dev/null &
SERVE_PID=$!
for _ in $(seq 200); do grep -q '"listening"' "$WORK/serve.log" 2>/dev/null && break; sleep 0.05; done
SERVE_PORT=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "listening" in l][0]["port"])' "$WORK/serve.log")

hyperfine -N --warmup 2 --runs "${RUNS:-10}" --export-json "$WORK/serve.json" \
  -n nginx "curl -s -o /dev/null http://127.0.0.1:$NGINX_PORT/$REL" \
  -n courier "curl -s -o /dev/null http://127.0.0.1:$SERVE_PORT/$REL" >&2
NGINX_S=$(mean_of "$WORK/serve.json" 0)
COURIER_S=$(mean_of "$WORK/serve.json" 1)
python3 - "$NGINX_S" "$COURIER_S" "$SIZE_MIB" <<'PY'
import sys
nginx, courier, size = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
print(f"serve {size} MiB: nginx {nginx:.3f} s ({size/nginx:.0f} MiB/s), courier serve {courier:.3f} s ({size/courier:.0f} MiB/s)")
print(f"throughput ratio courier/nginx = {nginx/courier:.2f} (goal >= 0.8)")
PY
