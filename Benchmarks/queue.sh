#!/usr/bin/env bash
# The queue with 10,000 transactions in the store: time of `courier list --json` (all and
# unfinished only) and of the text table. Prints the figures; not a test.
#
#   Benchmarks/queue.sh [COUNT]      (default 10000; builds release first, unless COURIER_BIN names a binary)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
count="${1:-10000}"
if [ -n "${COURIER_BIN:-}" ]; then
  courier="$COURIER_BIN"
else
  swift build -c release --static-swift-stdlib --product courier >/dev/null
  courier="$(swift build -c release --static-swift-stdlib --show-bin-path)/courier"
fi
echo "binary: $courier"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
storage="$work/Storage"
echo "{}" > "$work/courier.json"
export COURIER_CONFIG="$work/courier.json"

# Let courier create and migrate the store, then fill it with sqlite3: COUNT transactions, one
# download each; a tenth finished, a tenth paused halfway, the rest waiting.
"$courier" list --storage "$storage" >/dev/null
sqlite3 "$storage/state.sqlite" <<SQL
PRAGMA journal_mode = WAL;
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $count)
INSERT INTO transactions (id, originalTransactionId, productId, state, restored, verified, createdAt, updatedAt, finishedAt)
SELECT printf('2000%08d', i), printf('2000%08d', i), printf('com.example.p%d', i % 50),
       CASE WHEN i % 10 = 0 THEN 'finished' ELSE 'purchased' END, 0,
       json_object('transactionId', printf('2000%08d', i), 'originalTransactionId', printf('2000%08d', i),
                   'productId', printf('com.example.p%d', i % 50), 'bundleId', 'com.example.app',
                   'type', 'nonConsumable', 'purchaseDate', 1700000000, 'environment', 'Sandbox',
                   'signedDate', 1700000000),
       1700000000 + i, 1700000000 + i, CASE WHEN i % 10 = 0 THEN 1700000000 + i ELSE NULL END
FROM n;
INSERT INTO downloads (id, transactionId, contentIdentifier, productId, url, sha256, length, version, placement,
                       state, pauseReason, progress, bytesReceived, durableOffset, partialPath, createdAt, updatedAt)
SELECT substr(hex(randomblob(8)), 1, 16), t.id, t.productId, t.productId,
       'http://127.0.0.1:9/' || t.productId || '.zip', lower(hex(randomblob(32))), 1048576, '1.0', 'cache',
       CASE WHEN t.state = 'finished' THEN 'finished' WHEN CAST(substr(t.id, 5) AS INTEGER) % 10 = 5 THEN 'paused' ELSE 'waiting' END,
       CASE WHEN CAST(substr(t.id, 5) AS INTEGER) % 10 = 5 THEN 'user' ELSE NULL END,
       CASE WHEN t.state = 'finished' THEN 1 ELSE 0.5 END, 524288, 524288,
       '$storage/Downloads/x.part', t.createdAt, t.createdAt
FROM transactions t;
COMMIT;
SQL
echo "store: $count transactions, $(sqlite3 "$storage/state.sqlite" 'SELECT count(*) FROM downloads') downloads"
lines=$("$courier" list --json --all --storage "$storage" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["entries"]))')
echo "courier list --json --all prints $lines entries"
hyperfine --warmup 2 --runs 10 --export-markdown "$work/result.md" \
  -n "list --json --all" "$courier list --json --all --storage $storage" \
  -n "list --json (unfinished)" "$courier list --json --storage $storage" \
  -n "list (table)" "$courier list --storage $storage" 2>&1 | grep -E 'Benchmark|Time'

# Agent start with the store above: from exec to its control socket answering a status request
# (the agent has opened and migrated the store, recovered placements, and started the pipeline
# over the unfinished transactions by then). The waiting downloads point at a closed loopback
# port, so the agent's first claims fail fast as `network` and wait for their retry.
python3 - "$courier" "$storage" <<'PY'
import json, os, socket, statistics, subprocess, sys, time
courier, storage = sys.argv[1], sys.argv[2]
times = []
for run in range(5):
    start = time.monotonic()
    agent = subprocess.Popen([courier, "agent", "--storage", storage], stderr=subprocess.DEVNULL)
    while True:
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(os.path.join(storage, "agent.sock"))
            s.sendall(b'{"command":"status","ids":["200000000001"]}\n')
            if s.makefile().readline():
                break
        except OSError:
            time.sleep(0.005)
        finally:
            s.close()
        if time.monotonic() - start > 60:
            sys.exit("the agent did not answer in 60 s")
    times.append(time.monotonic() - start)
    agent.terminate()
    agent.wait()
print(f"agent start with the store above (exec -> socket answers): {statistics.mean(times) * 1000:.0f} ms mean of 5 "
      f"(min {min(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms)")
PY
