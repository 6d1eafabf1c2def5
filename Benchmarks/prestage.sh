#!/usr/bin/env bash
# 500 content packages of 200 KiB from nginx: `courier prestage --jobs 16` (fetch, verify SHA-256,
# inspect, stage, publish) vs `aria2c -j16` and `xargs -P16 -n50 curl -s --remote-name-all`
# (download only), in the same run (release build). Prints mean times and ratios
# (goal: <= 1.5x curl, faster than aria2c). Then a second prestage run with nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
COUNT=${COUNT:-500}
SIZE_KIB=${SIZE_KIB:-200}
# COURIER_BIN=path skips the release build (e.g. to measure another build).
if [ -z "${COURIER_BIN:-}" ]; then
  swift build -c release --product courier >&2
  BIN=$(swift build -c release --show-bin-path)/courier
else
  BIN=$COURIER_BIN
fi
WORK=$(mktemp -d /tmp/courier-bench-prestage.XXXXXX)
cleanup() { [ -n "${NGINX_PID:-}" ] && kill "$NGINX_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

mkdir -p "$WORK/upstream" "$WORK/src"
start_nginx "$WORK/upstream" "$WORK"
BASE="http://127.0.0.1:$NGINX_PORT"
echo "making $COUNT packages of ${SIZE_KIB} KiB with zip..." >&2
python3 - "$WORK" "$COUNT" "$SIZE_KIB" "$BASE" <<'PY'
import hashlib, json, os, subprocess, sys
work, count, size_kib, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
products, urls = [], []
for i in range(count):
    pid = f"com.example.pack{i:04d}"
    root = os.path.join(work, "src", pid)
    os.makedirs(os.path.join(root, "Contents"), exist_ok=True)
    with open(os.path.join(root, "ContentInfo.plist"), "w") as f:
        f.write(f'''<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0"><dict><key>ContentVersion</key><string>1.0</string><key>IAPProductIdentifier</key><string>{pid}</string></dict></plist>
''')
    with open(os.path.join(root, "Contents", "data.bin"), "wb") as f:
        f.write(os.urandom(size_kib * 1024 - 600))
    out = os.path.join(work, "upstream", f"{pid}.zip")
    subprocess.run(["zip", "-q", "-X", "-0", "-r", out, "ContentInfo.plist", "Contents"], cwd=root, check=True)
    data = open(out, "rb").read()
    products.append({"productId": pid, "content": {"url": f"{pid}.zip", "sha256": hashlib.sha256(data).hexdigest(),
                     "length": len(data), "version": "1.0", "placement": "cache"}})
    urls.append(f"{base}/{pid}.zip")
json.dump({"bundleId": "com.example.app", "products": products}, open(os.path.join(work, "upstream", "catalog.json"), "w"))
open(os.path.join(work, "urls.txt"), "w").write("\n".join(urls) + "\n")
PY
# The upstream catalog as a file whose relative URLs point at nginx.
python3 - "$WORK" "$BASE" <<'PY'
import json, sys
work, base = sys.argv[1], sys.argv[2]
c = json.load(open(f"{work}/upstream/catalog.json"))
for p in c["products"]:
    p["content"]["url"] = f"{base}/{p['content']['url']}"
json.dump(c, open(f"{work}/catalog.json", "w"))
PY

hyperfine -N --warmup 1 --runs "${RUNS:-5}" --export-json "$WORK/prestage.json" \
  --prepare "rm -rf $WORK/out-courier" \
  -n "courier prestage --jobs 16" "$BIN prestage --catalog $WORK/catalog.json --dest $WORK/out-courier --jobs 16 --json" \
  --prepare "sh -c 'rm -rf $WORK/out-aria2 && mkdir -p $WORK/out-aria2'" \
  -n "aria2c -j16" "aria2c -q -j16 -x1 --allow-overwrite=true --auto-file-renaming=false -d $WORK/out-aria2 -i $WORK/urls.txt" \
  --prepare "sh -c 'rm -rf $WORK/out-curl && mkdir -p $WORK/out-curl'" \
  -n "xargs curl" "sh -c 'cd $WORK/out-curl && xargs -P16 -n50 curl -s --remote-name-all < $WORK/urls.txt'" >&2
# Idempotent second run: nothing new to fetch.
hyperfine -N --runs 5 --export-json "$WORK/again.json" \
  -n "prestage again" "$BIN prestage --catalog $WORK/catalog.json --dest $WORK/out-courier --jobs 16 --json" >&2
python3 - "$WORK/prestage.json" "$WORK/again.json" "$COUNT" "$SIZE_KIB" <<'PY'
import json, sys
r = {x["command"]: x["mean"] for x in json.load(open(sys.argv[1]))["results"]}
again = json.load(open(sys.argv[2]))["results"][0]["mean"]
courier, aria, curl = r["courier prestage --jobs 16"], r["aria2c -j16"], r["xargs curl"]
print(f"prestage {sys.argv[3]} x {sys.argv[4]} KiB: courier {courier:.3f} s, aria2c {aria:.3f} s, xargs curl {curl:.3f} s")
print(f"courier/curl = {courier/curl:.2f} (goal <= 1.5); courier/aria2c = {courier/aria:.2f} (goal < 1.0)")
print(f"second run with nothing new: {again:.3f} s")
PY
