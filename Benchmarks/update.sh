#!/usr/bin/env bash
# A package of SIZE_MIB (default 512 MiB) in FILES (default 64) files, delivered at version 1.0;
# version 2.0 changes CHANGED (default 3) files. `courier update` to 2.0 twice from the same
# installed 1.0, against the same nginx in the same run: with a catalog that names the package's
# manifest (delta by entry: only the changed entries' byte ranges) and with one that does not
# (the whole package). Prints the bytes each fetched (nginx's access log) and wrote to storage
# (the process's write_bytes), the times, and the ratios: delta bytes / package size (goal <= 6%),
# delta time / full time (goal <= 10%). Not a test.
#
#   Benchmarks/update.sh                                    # release build
#   COURIER_BIN=.build/debug/courier SIZE_MIB=16 RUNS=1 Benchmarks/update.sh
#   SIZE_MIB=512 FILES=64 CHANGED=3 RUNS=3 ...              # knobs
#   BEFORE_BIN=/tmp/old-courier Benchmarks/update.sh        # also an older courier, paired:
#       the same packages, nginx and store steps, the two builds alternating in each round;
#       prints the median of the per-round ratios (this / before) and each one's CPU time
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
SIZE_MIB=${SIZE_MIB:-512}
FILES=${FILES:-64}
CHANGED=${CHANGED:-3}
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
WORK=$(mktemp -d /tmp/courier-bench-update.XXXXXX)
cleanup() { [ -n "${NGINX_PID:-}" ] && kill "$NGINX_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
echo "{}" > "$WORK/courier.json"
export COURIER_CONFIG="$WORK/courier.json"
PRODUCT=com.example.bench.update

# Versions 1.0 and 2.0 of the folder: FILES files of random bytes; 2.0 rewrites CHANGED of them.
python3 - "$WORK" "$SIZE_MIB" "$FILES" "$CHANGED" <<'PY'
import os, sys
work, size, files, changed = sys.argv[1], int(sys.argv[2]) << 20, int(sys.argv[3]), int(sys.argv[4])
each = size // files
step = max(files // max(changed, 1), 1)
rewritten = {(i * step + step // 2) % files for i in range(changed)}
for version in ("v1", "v2"):
    os.makedirs(f"{work}/{version}/levels", exist_ok=True)
for i in range(files):
    data = os.urandom(each)
    open(f"{work}/v1/levels/level{i:03d}.dat", "wb").write(data)
    open(f"{work}/v2/levels/level{i:03d}.dat", "wb").write(os.urandom(each) if i in rewritten else data)
PY
mkdir -p "$WORK/www"
"$BIN" package create "$WORK/v1" --product "$PRODUCT" --version 1.0 -o "$WORK/www/v1.zip" >/dev/null
"$BIN" package create "$WORK/v2" --product "$PRODUCT" --version 2.0 -o "$WORK/www/v2.zip" >/dev/null
rm -rf "$WORK/v1" "$WORK/v2"
python3 - "$WORK/www" "$PRODUCT" <<'PY'
import hashlib, json, os, sys
www, product = sys.argv[1], sys.argv[2]
def digest(name):
    data = open(os.path.join(www, name), "rb").read()
    return hashlib.sha256(data).hexdigest(), len(data)
def catalog(name, version, manifest):
    sha, length = digest(f"{name}.zip")
    content = {"url": f"{name}.zip", "sha256": sha, "length": length, "version": version, "placement": "documents"}
    if manifest:
        msha, mlength = digest(f"{name}.manifest.json")
        content["manifest"] = {"url": f"{name}.manifest.json", "sha256": msha, "length": mlength}
    return {"bundleId": "com.example.app", "products": [{"productId": product, "content": content}]}
json.dump(catalog("v1", "1.0", False), open(f"{www}/catalog-v1.json", "w"))
json.dump(catalog("v2", "2.0", False), open(f"{www}/catalog-full.json", "w"))
json.dump(catalog("v2", "2.0", True), open(f"{www}/catalog-delta.json", "w"))
PY
PACKAGE_BYTES=$(stat -c %s "$WORK/www/v2.zip")

# nginx with an access log: `$body_bytes_sent` counts what each update fetched.
start_nginx "$WORK/www" "$WORK" "$WORK/access.log"
BASE="http://127.0.0.1:$NGINX_PORT"
echo "package of $((PACKAGE_BYTES >> 20)) MiB, $FILES files, $CHANGED changed; origin nginx on $BASE"

# One purchase; each update starts from a store where it was just delivered at 1.0 (not a copy:
# the installed files' inodes and change times are what the delta trusts them by).
TRUST=$("$BIN" sandbox init --dir "$WORK/sandbox" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["trustRootDER"])')
"$BIN" sandbox purchase "$PRODUCT" --dir "$WORK/sandbox" > "$WORK/receipt.txt"

# run MODE [BINARY] -> prints "seconds bytes written cpu": one update of a fresh 1.0 delivery
# (delivered and updated by BINARY, default this build).
run() {
  local mode=$1 bin=${2:-$BIN}
  rm -rf "$WORK/Storage"
  "$bin" deliver --receipt "$WORK/receipt.txt" --catalog "$BASE/catalog-v1.json" --trust-root "$TRUST" \
    --environment Sandbox --storage "$WORK/Storage" >/dev/null
  cat "$WORK/www/v2.zip" > /dev/null   # page cache warm for both updates
  sync
  : > "$WORK/access.log"
  local elapsed written
  # The update process's wall time (from fork to its exit, taken around it so the interpreter's
  # own start is not counted) and the bytes it wrote to storage (its write_bytes, from
  # getrusage's ru_oublock).
  local cpu
  read -r elapsed written cpu < <(python3 - "$WORK/update-$mode.out" "$bin" update --catalog "$BASE/catalog-$mode.json" --trust-root "$TRUST" \
    --environment Sandbox --storage "$WORK/Storage" <<'PY'
import os, sys, time
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
start = time.monotonic()
pid = os.fork()
if pid == 0:
    os.dup2(out, 1)
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
elapsed = time.monotonic() - start
if os.waitstatus_to_exitcode(status) != 0:
    sys.exit(f"update exited with {os.waitstatus_to_exitcode(status)}")
print(f"{elapsed:.4f} {usage.ru_oublock * 512} {usage.ru_utime + usage.ru_stime:.4f}")
PY
)
  local version
  version=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select version from delivered_content').fetchone()[0])" "$WORK/Storage/state.sqlite")
  [ "$version" = "2.0" ] || { echo "update ($mode) left version $version" >&2; exit 1; }
  sleep 0.2   # nginx writes a request's log line once it has sent the response
  python3 - "$elapsed" "$WORK/access.log" "$written" "$cpu" <<'PY'
import sys
elapsed, log, written, cpu = float(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
total = sum(int(line.split()[2]) for line in open(log) if "/v2." in line.split()[0])
print(f"{elapsed:.3f} {total} {written} {cpu:.3f}")
PY
}

FULL=(); DELTA=(); BEFORE_FULL=(); BEFORE_DELTA=()
for round in $(seq 1 "$RUNS"); do
  if [ -n "${BEFORE_BIN:-}" ] && [ $((round % 2)) -eq 0 ]; then
    # Alternate which build goes first: neither always meets the other's page cache and flushes.
    BEFORE_FULL+=("$(run full "$BEFORE_BIN")"); BEFORE_DELTA+=("$(run delta "$BEFORE_BIN")")
  fi
  FULL+=("$(run full)")
  DELTA+=("$(run delta)")
  if [ -n "${BEFORE_BIN:-}" ] && [ $((round % 2)) -eq 1 ]; then
    BEFORE_FULL+=("$(run full "$BEFORE_BIN")"); BEFORE_DELTA+=("$(run delta "$BEFORE_BIN")")
  fi
done
python3 - "$PACKAGE_BYTES" "$SIZE_MIB" "$FILES" "$CHANGED" "${FULL[@]}" -- "${DELTA[@]}" <<'PY'
import statistics, sys
package, size, files, changed = (int(x) for x in sys.argv[1:5])
rest = sys.argv[5:]
split = rest.index("--")
full = [tuple(map(float, r.split())) for r in rest[:split]]
delta = [tuple(map(float, r.split())) for r in rest[split + 1:]]
ft, db = statistics.mean(t for t, *_ in full), statistics.mean(b for _, b, *_ in delta)
dt, fb = statistics.mean(t for t, *_ in delta), statistics.mean(b for _, b, *_ in full)
fw, dw = statistics.mean(w for _, _, w, *_ in full), statistics.mean(w for _, _, w, *_ in delta)
print(f"full update : {ft:.2f} s mean of {len(full)} ({', '.join(f'{t:.2f}' for t, *_ in full)}), "
      f"{fb / 2**20:.1f} MiB fetched, {fw / 2**20:.1f} MiB written")
print(f"delta update: {dt:.2f} s mean of {len(delta)} ({', '.join(f'{t:.2f}' for t, *_ in delta)}), "
      f"{db / 2**20:.2f} MiB fetched, {dw / 2**20:.2f} MiB written ({dw / max(db, 1):.2f}x the bytes fetched)")
print(f"delta bytes / package = {db / package * 100:.2f}% (goal <= 6%)")
print(f"delta time / full time = {dt / ft * 100:.1f}% (goal <= 10%)")
PY
if [ -n "${BEFORE_BIN:-}" ]; then
  python3 - "${FULL[*]}" "${DELTA[*]}" "${BEFORE_FULL[*]}" "${BEFORE_DELTA[*]}" <<'PY'
import statistics, sys
def rows(text):
    values = text.split()
    return [tuple(map(float, values[i:i + 4])) for i in range(0, len(values), 4)]
full, delta, bfull, bdelta = (rows(a) for a in sys.argv[1:5])
for name, new, old in (("full", full, bfull), ("delta", delta, bdelta)):
    ratios = sorted(n[0] / o[0] for n, o in zip(new, old))
    cpu = sorted(n[3] / o[3] for n, o in zip(new, old))
    print(f"{name} update, this / BEFORE_BIN: time median {statistics.median(ratios):.3f} "
          f"({', '.join(f'{r:.3f}' for r in ratios)}); CPU median {statistics.median(cpu):.3f}; "
          f"means {statistics.mean(n[0] for n in new):.3f} s vs {statistics.mean(o[0] for o in old):.3f} s, "
          f"CPU {statistics.mean(n[3] for n in new):.3f} s vs {statistics.mean(o[3] for o in old):.3f} s")
PY
fi
