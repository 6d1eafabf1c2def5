#!/usr/bin/env bash
# 200 purchases with 1 MiB packages through `courier deliver` (validate, entitle, download,
# verify, unpack, place, record, finish) against downloading the same packages with
# `xargs -P16 -n50 curl` (download only), in the same run against the same nginx. Prints both
# times, the ratio (goal <= 1.5) and the per-purchase overhead. Then the 10,000-transaction
# `courier list --json` figures from Benchmarks/queue.sh. Not a test.
#
#   Benchmarks/deliver.sh                                   # release build
#   COURIER_BIN=.build/debug/courier RUNS=3 Benchmarks/deliver.sh
#   PURCHASES=200 SIZE_KIB=1024 SKIP_QUEUE=1 ...           # knobs
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
PURCHASES=${PURCHASES:-200}
SIZE_KIB=${SIZE_KIB:-1024}
RUNS=${RUNS:-3}
if [ -z "${COURIER_BIN:-}" ]; then
  swift build -c release --product courier >&2
  BIN=$(swift build -c release --show-bin-path)/courier
else
  BIN=$(realpath "$COURIER_BIN")
fi
case "$BIN" in
  */debug/*) echo "binary: $BIN (DEBUG build: figures are pessimistic)" ;;
  *) echo "binary: $BIN" ;;
esac
WORK=$(mktemp -d /tmp/courier-bench-deliver.XXXXXX)
cleanup() { [ -n "${NGINX_PID:-}" ] && kill "$NGINX_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
echo "{}" > "$WORK/courier.json"
export COURIER_CONFIG="$WORK/courier.json"

# The store, and PURCHASES packages (stored zips: ContentInfo.plist + Contents/data.bin of random bytes).
TRUST=$("$BIN" sandbox init --dir "$WORK/sandbox" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["trustRootDER"])')
mkdir -p "$WORK/www"
python3 - "$WORK/www" "$PURCHASES" "$SIZE_KIB" <<'PY'
import hashlib, json, os, sys, zipfile
www, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) * 1024
plist = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
\t<key>ContentVersion</key>
\t<string>1.0</string>
\t<key>IAPProductIdentifier</key>
\t<string>{}</string>
</dict>
</plist>
"""
products = []
for i in range(1, count + 1):
    product = f"com.example.bench{i}"
    path = os.path.join(www, f"{product}.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("ContentInfo.plist", plist.format(product))
        z.writestr("Contents/data.bin", os.urandom(size))
    data = open(path, "rb").read()
    products.append({"productId": product, "content": {
        "url": f"{product}.zip", "sha256": hashlib.sha256(data).hexdigest(), "length": len(data),
        "version": "1.0", "placement": "cache" if i % 2 else "documents"}})
json.dump({"bundleId": "com.example.app", "products": products}, open(os.path.join(www, "catalog.json"), "w"))
with open(os.path.join(www, "..", "urls.txt"), "w") as f:
    for p in products: f.write(p["content"]["url"] + "\n")
PY
for i in $(seq 1 "$PURCHASES"); do
  "$BIN" sandbox purchase "com.example.bench$i" --dir "$WORK/sandbox"
done > "$WORK/receipt.txt"
cat "$WORK/www"/*.zip > /dev/null   # page cache warm for both clients

start_nginx "$WORK/www" "$WORK"
BASE="http://127.0.0.1:$NGINX_PORT"
sed "s|^|$BASE/|" "$WORK/urls.txt" > "$WORK/full-urls.txt"
echo "$PURCHASES purchases, packages of $SIZE_KIB KiB, origin nginx on $BASE"

# One deliver first to check it works end to end (and that the figures mean something).
"$BIN" deliver --receipt "$WORK/receipt.txt" --catalog "$BASE/catalog.json" --trust-root "$TRUST" \
  --environment Sandbox --storage "$WORK/check" --json > "$WORK/check.ndjson"
python3 - "$WORK/check.ndjson" "$PURCHASES" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
finished = len(events[-1].get("finishedTransactions", []))
assert finished == int(sys.argv[2]), f"deliver finished {finished} transactions: {events[-1]}"
print(f"check: deliver finished {finished} transactions")
PY
rm -rf "$WORK/check"

hyperfine -N --runs "$RUNS" --warmup 0 --export-json "$WORK/deliver.json" \
  --prepare "rm -rf $WORK/dl $WORK/Storage" \
  -n "xargs -P16 -n50 curl" "bash -c 'mkdir -p $WORK/dl && cd $WORK/dl && xargs -P16 -n50 curl -s --remote-name-all < $WORK/full-urls.txt'" \
  -n "courier deliver" "$BIN deliver --receipt $WORK/receipt.txt --catalog $BASE/catalog.json --trust-root $TRUST --environment Sandbox --storage $WORK/Storage" >&2
CURL_S=$(mean_of "$WORK/deliver.json" 0)
DELIVER_S=$(mean_of "$WORK/deliver.json" 1)
python3 - "$CURL_S" "$DELIVER_S" "$PURCHASES" "$SIZE_KIB" <<'PY'
import sys
curl, deliver, n, kib = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(f"{n} purchases x {kib} KiB: xargs -P16 -n50 curl {curl:.2f} s (download only), courier deliver {deliver:.2f} s")
print(f"ratio deliver/curl = {deliver / curl:.2f} (goal <= 1.5); per-purchase overhead {(deliver - curl) / n * 1000:.1f} ms")
PY

if [ -z "${SKIP_QUEUE:-}" ]; then
  echo "== 10,000 transactions in the store (Benchmarks/queue.sh)"
  COURIER_BIN="$BIN" Benchmarks/queue.sh 10000
fi
