#!/usr/bin/env bash
# What the signed catalog costs (docs/trust.md, "What it costs"): `courier deliver` of one sandbox
# purchase from nginx on loopback, into a fresh store each run, with `--catalog-root` (the catalog
# through TUF: root, timestamp, snapshot, targets, then the hash-prefixed catalog) and without
# (the catalog fetched directly), interleaved in the same run against the same nginx. Prints the
# median of each and the difference. Not a test.
#
#   COURIER_BIN=.build/debug/courier RUNS=7 Benchmarks/trust.sh   # default: the release build
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
RUNS=${RUNS:-7}
if [ -z "${COURIER_BIN:-}" ]; then build_release; else BIN=$(realpath "$COURIER_BIN"); fi
case "$BIN" in
  */debug/*) echo "binary: $BIN (DEBUG build: figures are pessimistic)" ;;
  *) echo "binary: $BIN" ;;
esac
WORK=$(mktemp -d /tmp/courier-bench-trust.XXXXXX)
cleanup() { [ -n "${NGINX_PID:-}" ] && kill "$NGINX_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
echo "{}" >"$WORK/none.json"
export COURIER_CONFIG="$WORK/none.json"

"$BIN" sandbox init --storage "$WORK/publisher" >/dev/null
sandbox="$WORK/publisher/Sandbox"
"$BIN" sandbox purchase com.example.levels.pack1 --storage "$WORK/publisher" >"$WORK/receipt.jws"
start_nginx "$sandbox" "$WORK"
url="http://127.0.0.1:$NGINX_PORT/catalog.json"

# deliver_once LABEL [ARGS...] -> appends the seconds one fresh deliver took to $WORK/LABEL
deliver_once() {
  local label=$1; shift
  local store="$WORK/store-$label-$RANDOM$RANDOM"
  local start end
  start=$(date +%s.%N)
  "$BIN" deliver --storage "$store" --receipt "$WORK/receipt.jws" --trust-root "$sandbox/root.pem" \
    --environment Sandbox --catalog "$url" "$@" >/dev/null
  end=$(date +%s.%N)
  echo "$end - $start" | bc >>"$WORK/$label"
  rm -rf "$store"
}

for _ in $(seq "$RUNS"); do
  deliver_once unsigned
  deliver_once signed --catalog-root "$sandbox/metadata/1.root.json"
done
median() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
unsigned=$(median "$WORK/unsigned")
signed=$(median "$WORK/signed")
echo "deliver, one purchase, $RUNS runs each (median): unsigned catalog ${unsigned} s, signed (TUF) ${signed} s"
echo "the signed flow costs $(echo "$signed - $unsigned" | bc) s per deliver"
