#!/usr/bin/env bash
# Receipt benchmarks (not a test): how fast `courier receipt verify` proves signed transactions,
# and the peak memory of refusing a 10 MB input. Uses the sandbox store to sign.
#   Benchmarks/receipts.sh                       # release build, 200 transactions
#   COURIER_BIN=.build/debug/courier TOKENS=50 RUNS=3 Benchmarks/receipts.sh
set -euo pipefail

cd "$(dirname "$0")/.."
TOKENS=${TOKENS:-200}
RUNS=${RUNS:-5}
if [[ -z "${COURIER_BIN:-}" ]]; then
    echo "== building release"
    swift build -c release --static-swift-stdlib --product courier 2>&1 | grep -E 'error|warning|Build' | tail -3
    COURIER_BIN="$(swift build -c release --static-swift-stdlib --show-bin-path)/courier"
fi
BIN=$(realpath "$COURIER_BIN")
WORK=$(mktemp -d /tmp/courier-receipts-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

"$BIN" sandbox init --dir "$WORK/sandbox" > /dev/null
echo "== signing $TOKENS transactions"
for i in $(seq 1 "$TOKENS"); do
    "$BIN" sandbox purchase "com.example.product$i" --dir "$WORK/sandbox"
done > "$WORK/many.jws"
head -n 1 "$WORK/many.jws" > "$WORK/one.jws"
head -c $((10 << 20)) /dev/zero | tr '\0' 'A' > "$WORK/huge.receipt"

hyperfine --runs "$RUNS" --warmup 1 --export-json "$WORK/h.json" \
    -n one "$BIN receipt verify $WORK/one.jws --trust-root $WORK/sandbox --environment Sandbox" \
    -n many "$BIN receipt verify $WORK/many.jws --trust-root $WORK/sandbox --environment Sandbox" > /dev/null
python3 - "$WORK/h.json" "$TOKENS" <<'PY'
import json, sys
results = {r["command"]: r["mean"] for r in json.load(open(sys.argv[1]))["results"]}
tokens = int(sys.argv[2])
per = (results["many"] - results["one"]) / max(tokens - 1, 1)
print(f"one transaction: {results['one'] * 1000:.1f} ms per process")
print(f"{tokens} transactions: {results['many'] * 1000:.1f} ms; {per * 1000:.2f} ms each, {1 / per if per > 0 else 0:.0f}/s")
PY
/usr/bin/time -f "10 MB input refused (exit 3): peak RSS %M KiB" "$BIN" receipt verify "$WORK/huge.receipt" --trust-root "$WORK/sandbox" --environment Sandbox 2>&1 >/dev/null | grep peak || true
/usr/bin/time -f "one transaction verified: peak RSS %M KiB" "$BIN" receipt verify "$WORK/one.jws" --trust-root "$WORK/sandbox" --environment Sandbox 2>&1 >/dev/null | grep peak || true
