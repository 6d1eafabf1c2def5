#!/usr/bin/env bash
# `courier content open` (docs/delivery-classes.md) against a plain `courier deliver`, same nginx,
# same package: open of placed content (a store lookup, no network), open of content that is not
# placed (deleted or purged: fetched, verified, unpacked, placed, pinned), and a deliver of the
# same package into a fresh store. Prints the mean of each and the ratios. Not a test.
#
#   Benchmarks/content-open.sh                               # release build
#   COURIER_BIN=.build/debug/courier RUNS=5 Benchmarks/content-open.sh
#   SIZE_KIB=16384 ...                                       # package size
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
SIZE_KIB=${SIZE_KIB:-16384}
RUNS=${RUNS:-10}
if [ -z "${COURIER_BIN:-}" ]; then build_release; else BIN=$(realpath "$COURIER_BIN"); fi
case "$BIN" in
  */debug/*) echo "binary: $BIN (DEBUG build: figures are pessimistic)" ;;
  *) echo "binary: $BIN" ;;
esac
WORK=$(mktemp -d /tmp/courier-bench-open.XXXXXX)
cleanup() { [ -n "${NGINX_PID:-}" ] && kill "$NGINX_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
echo "{}" > "$WORK/courier.json"
export COURIER_CONFIG="$WORK/courier.json" COURIER_NO_AGENT=1

TRUST=$("$BIN" sandbox init --dir "$WORK/sandbox" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["trustRootDER"])')
mkdir -p "$WORK/www"
python3 - "$WORK/www" "$SIZE_KIB" <<'PY'
import hashlib, json, os, sys, zipfile
www, size = sys.argv[1], int(sys.argv[2]) * 1024
plist = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0"><dict><key>ContentVersion</key><string>1.0</string>
<key>IAPProductIdentifier</key><string>com.example.ondemand</string></dict></plist>
"""
path = os.path.join(www, "ondemand.zip")
with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
    z.writestr("ContentInfo.plist", plist)
    z.writestr("Contents/data.bin", os.urandom(size))
data = open(path, "rb").read()
content = {"url": "ondemand.zip", "sha256": hashlib.sha256(data).hexdigest(), "length": len(data),
           "version": "1.0", "placement": "cache"}
for name, delivery in (("catalog-ondemand.json", "onDemand"), ("catalog-essential.json", "essential")):
    json.dump({"bundleId": "com.example.app", "products": [
        {"productId": "com.example.ondemand", "content": dict(content, delivery=delivery)}]},
        open(os.path.join(www, name), "w"))
PY
"$BIN" sandbox purchase com.example.ondemand --dir "$WORK/sandbox" > "$WORK/receipt.txt"
cat "$WORK/www"/*.zip > /dev/null
start_nginx "$WORK/www" "$WORK"
BASE="http://127.0.0.1:$NGINX_PORT"
echo "one package of $SIZE_KIB KiB, origin nginx on $BASE"
DELIVER=(deliver --receipt "$WORK/receipt.txt" --trust-root "$TRUST" --environment Sandbox)
OPEN="$BIN content open com.example.ondemand --catalog $BASE/catalog-ondemand.json --storage $WORK/store -q"

# The purchase is delivered (nothing fetched: on-demand), then opened once: placed and pinned.
"$BIN" "${DELIVER[@]}" --catalog "$BASE/catalog-ondemand.json" --storage "$WORK/store" -q
[ ! -d "$WORK/store/Caches/com.example.ondemand" ] || { echo "deliver fetched on-demand content" >&2; exit 1; }
$OPEN > /dev/null
[ -d "$WORK/store/Caches/com.example.ondemand" ] || { echo "content open placed nothing" >&2; exit 1; }

hyperfine --style basic --runs "$RUNS" --export-json "$WORK/open.json" \
  --prepare "true" \
  --prepare "$BIN content delete com.example.ondemand --storage $WORK/store -q" \
  --prepare "rm -rf $WORK/fresh" \
  -n "content open (placed: a lookup)" -n "content open (not placed: fetched)" -n "deliver (fresh store)" \
  "$OPEN" "$OPEN" "$BIN ${DELIVER[*]} --catalog $BASE/catalog-essential.json --storage $WORK/fresh -q"
placed=$(mean_of "$WORK/open.json" 0)
fetched=$(mean_of "$WORK/open.json" 1)
deliver=$(mean_of "$WORK/open.json" 2)
python3 - "$placed" "$fetched" "$deliver" <<'PY'
import sys
placed, fetched, deliver = map(float, sys.argv[1:])
print(f"content open, placed:     {placed * 1000:8.1f} ms  ({placed / deliver:.2f} x deliver)")
print(f"content open, not placed: {fetched * 1000:8.1f} ms  ({fetched / deliver:.2f} x deliver)")
print(f"deliver, fresh store:     {deliver * 1000:8.1f} ms")
PY
