#!/usr/bin/env bash
# Rate limiter accuracy (not a test): the bytes on disk are sampled every 0.25 s while courier
# downloads from nginx on loopback under a limit, and the worst 10 s window is reported as a
# ratio of the limit (1.00 is exact; issue 30 asks for 0.90 to 1.10).
#   Benchmarks/ratelimit.sh                          # 4M limit, 40 s per scenario
#   RATE=2M SECONDS_EACH=30 Benchmarks/ratelimit.sh
#   COURIER_BIN=.build/debug/courier Benchmarks/ratelimit.sh   # reuse a built binary
# Scenarios, each against curl's own --limit-rate where curl has one:
#   get      one `courier get --limit-rate RATE` (a per-transfer limit, as curl's)
#   maxRate  16 downloads at once (`get -i`, -j 16) under transfer.maxRate = RATE together
set -euo pipefail

cd "$(dirname "$0")/.."
source Benchmarks/common.sh
RATE=${RATE:-4M}
SECONDS_EACH=${SECONDS_EACH:-40}

if [[ -n "${COURIER_BIN:-}" ]]; then
    BIN="$COURIER_BIN"
else
    echo "== building release"
    build_release
fi
echo "== courier: $BIN"

BYTES=$(python3 -c "import sys; r=sys.argv[1]; u={'k':1<<10,'K':1<<10,'m':1<<20,'M':1<<20,'g':1<<30,'G':1<<30}.get(r[-1]); print(int(float(r[:-1])*u) if u else int(r))" "$RATE")
WORK=$(mktemp -d /tmp/courier-ratelimit.XXXXXX)
NGINX_PID=""
cleanup() {
    if [[ -n "$NGINX_PID" ]]; then kill "$NGINX_PID" 2>/dev/null || true; wait "$NGINX_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/site" "$WORK/nginx"
# Files larger than the run can fetch: the limit, not the file, ends each window.
SIZE=$((BYTES * (SECONDS_EACH + 20)))
head -c "$SIZE" /dev/urandom > "$WORK/site/big.bin"
for i in $(seq -w 1 16); do head -c $((SIZE / 8)) /dev/urandom > "$WORK/site/part$i.bin"; done
start_nginx "$WORK/site" "$WORK/nginx"
echo "{}" > "$WORK/config.json"
printf '{"transfer": {"maxRate": "%s"}}\n' "$RATE" > "$WORK/config-maxrate.json"

# sample DIR SECONDS -> the worst and best 10 s window of the bytes under DIR, as rates
# (bytes/s), skipping the first 2 s (connection set-up).
sample() {
    python3 - "$1" "$2" "$BYTES" <<'PY'
import os, sys, time
folder, seconds, limit = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
samples, start = [], time.monotonic()
while time.monotonic() - start < seconds:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try: total += os.stat(os.path.join(root, name)).st_size
            except OSError: pass
    samples.append((time.monotonic() - start, total))
    time.sleep(0.25)
rates = []
for i, (t0, b0) in enumerate(samples):
    if t0 < 2: continue
    for t1, b1 in samples[i:]:
        if t1 - t0 >= 10:
            rates.append((b1 - b0) / (t1 - t0)); break
if not rates: print("no full 10 s window"); sys.exit(0)
print(f"worst-low {min(rates)/limit:.3f}  worst-high {max(rates)/limit:.3f}  mean {sum(rates)/len(rates)/limit:.3f}  ({len(rates)} windows of 10 s)")
PY
}

run_for() {  # run_for NAME OUTDIR CMD...: runs CMD in the background, samples OUTDIR, stops CMD
    local name=$1 out=$2; shift 2
    rm -rf "$out"; mkdir -p "$out"
    "$@" >/dev/null 2>"$WORK/$name.err" &
    local pid=$!
    printf '%-28s ' "$name"
    sample "$out" "$SECONDS_EACH"
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
}

URL="http://127.0.0.1:$NGINX_PORT"
echo "== limit $RATE ($BYTES bytes/s), ${SECONDS_EACH}s per scenario; ratios of the limit"
run_for "curl --limit-rate" "$WORK/out-curl" curl -s --limit-rate "$RATE" -o "$WORK/out-curl/big.bin" "$URL/big.bin"
run_for "courier get --limit-rate" "$WORK/out-get" \
    "$BIN" get "$URL/big.bin" -o "$WORK/out-get/big.bin" --limit-rate "$RATE" --config "$WORK/config.json" --storage "$WORK/storage-1"
for i in $(seq -w 1 16); do echo "$URL/part$i.bin"; done > "$WORK/urls.txt"
run_for "courier 16 x maxRate" "$WORK/out-16" \
    "$BIN" get -i "$WORK/urls.txt" -d "$WORK/out-16" -j 16 --config "$WORK/config-maxrate.json" --storage "$WORK/storage-2"
