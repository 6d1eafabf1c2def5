#!/usr/bin/env bash
# 200 purchases with 1 MiB packages through `courier deliver` and through `courier agent`
# (validate, entitle, download, verify, unpack, place, record, finish) against downloading the same packages with
# `xargs -P16 -n50 curl` (download only) and against the hand pipeline (curl, sha256sum,
# bsdtar, mv per package, 16 at a time), in the same run against the same nginx. Prints the
# times, the ratios (goals: <= 1.5 to curl, <= 0.5 to the hand pipeline) and the per-purchase
# overhead. Then the 10,000-transaction `courier list --json` figures from Benchmarks/queue.sh.
# Not a test.
#
#   BASELINE_BIN=/tmp/old-courier Benchmarks/deliver.sh    # also an older courier, paired
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
  swift build -c release --static-swift-stdlib --product courier >&2
  BIN=$(swift build -c release --static-swift-stdlib --show-bin-path)/courier
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
with open(os.path.join(www, "..", "hand.txt"), "w") as f:
    for p in products: f.write(f'{p["productId"]} {p["content"]["url"]} {p["content"]["sha256"]}\n')
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

# The hand pipeline a script would run for the same work, 16 at a time: download, check the
# SHA-256, unpack into a temporary folder, rename it into place (issue 30 item 4's yardstick).
cat > "$WORK/hand.sh" <<'SH'
#!/bin/sh
# hand.sh BASE DIR PRODUCT URL SHA256
set -e
base=$1 dir=$2 product=$3 url=$4 sha=$5
curl -s -o "$dir/$product.zip" "$base/$url"
echo "$sha  $dir/$product.zip" | sha256sum -c --quiet -
mkdir -p "$dir/$product.tmp"
bsdtar -xf "$dir/$product.zip" -C "$dir/$product.tmp"
mv "$dir/$product.tmp" "$dir/$product"
rm "$dir/$product.zip"
SH
chmod +x "$WORK/hand.sh"
hyperfine -N --runs "$RUNS" --warmup 0 --export-json "$WORK/deliver.json" \
  --prepare "rm -rf $WORK/dl $WORK/hand $WORK/Storage" \
  -n "xargs -P16 -n50 curl" "bash -c 'mkdir -p $WORK/dl && cd $WORK/dl && xargs -P16 -n50 curl -s --remote-name-all < $WORK/full-urls.txt'" \
  -n "courier deliver" "$BIN deliver --receipt $WORK/receipt.txt --catalog $BASE/catalog.json --trust-root $TRUST --environment Sandbox --storage $WORK/Storage" \
  -n "hand pipeline" "bash -c 'mkdir -p $WORK/hand && xargs -P16 -L1 $WORK/hand.sh $BASE $WORK/hand < $WORK/hand.txt'" \
  ${BASELINE_BIN:+-n "baseline deliver" "$BASELINE_BIN deliver --receipt $WORK/receipt.txt --catalog $BASE/catalog.json --trust-root $TRUST --environment Sandbox --storage $WORK/Storage"} >&2
CURL_S=$(mean_of "$WORK/deliver.json" 0)
DELIVER_S=$(mean_of "$WORK/deliver.json" 1)
HAND_S=$(mean_of "$WORK/deliver.json" 2)
python3 - "$CURL_S" "$DELIVER_S" "$PURCHASES" "$SIZE_KIB" "$HAND_S" <<'PY'
import sys
curl, deliver, n, kib, hand = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
print(f"{n} purchases x {kib} KiB: xargs -P16 -n50 curl {curl:.2f} s (download only), courier deliver {deliver:.2f} s")
print(f"ratio deliver/curl = {deliver / curl:.2f} (goal <= 1.5); per-purchase overhead {(deliver - curl) / n * 1000:.1f} ms")
print(f"hand pipeline (curl, sha256sum, bsdtar, mv; 16 at a time) {hand:.2f} s: ratio deliver/hand = {deliver / hand:.2f} (goal <= 0.5)")
PY
if [ -n "${BASELINE_BIN:-}" ]; then
  python3 - "$DELIVER_S" "$(mean_of "$WORK/deliver.json" 3)" <<'PY'
import sys
new, old = float(sys.argv[1]), float(sys.argv[2])
print(f"baseline deliver {old:.2f} s: ratio this/baseline = {new / old:.2f}")
PY
fi

# The same purchases through the agent: `courier enqueue` hands the receipt over the control
# socket and the agent validates, downloads, unpacks, places and finishes. Timed from the enqueue
# to the last transaction finished in the store (polled every 20 ms with sqlite3); the agent
# is started (and its socket up) before the clock starts, as a resident agent would be.
AGENT_TIMES=()
for run in $(seq 1 "$RUNS"); do
  rm -rf "$WORK/AgentStorage"
  "$BIN" agent --storage "$WORK/AgentStorage" --catalog "$BASE/catalog.json" --trust-root "$TRUST" \
    --environment Sandbox 2>"$WORK/agent.log" &
  AGENT_PID=$!
  for _ in $(seq 200); do [ -S "$WORK/AgentStorage/agent.sock" ] && break; sleep 0.05; done
  T=$(python3 - "$BIN" "$WORK/receipt.txt" "$WORK/AgentStorage" "$PURCHASES" <<'PY'
import sqlite3, subprocess, sys, time
bin, receipt, storage, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
start = time.monotonic()
subprocess.run([bin, "enqueue", "--receipt", receipt, "--storage", storage], check=True, stdout=subprocess.DEVNULL)
db = sqlite3.connect(f"file:{storage}/state.sqlite?mode=ro", uri=True)
while db.execute("SELECT count(*) FROM transactions WHERE state = 'finished'").fetchone()[0] < n:
    if time.monotonic() - start > 600: sys.exit("the agent did not finish in 600 s")
    time.sleep(0.02)
print(f"{time.monotonic() - start:.3f}")
PY
)
  kill -TERM "$AGENT_PID"; wait "$AGENT_PID" || true
  AGENT_TIMES+=("$T")
done
python3 - "$CURL_S" "$PURCHASES" "${AGENT_TIMES[@]}" <<'PY'
import statistics, sys
curl, n, runs = float(sys.argv[1]), int(sys.argv[2]), [float(t) for t in sys.argv[3:]]
mean = statistics.mean(runs)
print(f"through the agent (enqueue -> all finished): {mean:.2f} s mean of {len(runs)} ({', '.join(f'{t:.2f}' for t in runs)})")
print(f"ratio agent/curl = {mean / curl:.2f} (goal <= 1.5); per-purchase overhead {(mean - curl) / n * 1000:.1f} ms")
PY

if [ -z "${SKIP_QUEUE:-}" ]; then
  echo "== 10,000 transactions in the store (Benchmarks/queue.sh)"
  COURIER_BIN="$BIN" Benchmarks/queue.sh 10000
fi
