#!/usr/bin/env bash
# 500 content packages of 200 KiB from nginx: `courier prestage --jobs 16` (fetch, verify SHA-256,
# inspect, stage, publish), in one process and with the PostgreSQL queue (`--queue`), vs
# `aria2c -j16` and `xargs -P16 -n50 curl -s --remote-name-all` (download only), in the same run
# (release build), and three worker processes on the queue (JOBS3 each). Prints mean times and
# ratios (goal: <= 2.5x xargs curl, with the queue as well as without). Then a second prestage
# run with nothing new, and one worker against three (`--queue`, one PostgreSQL) on BIG_COUNT
# packages of BIG_MIB MiB, against xargs curl (BIG=0 skips these two: the rounds only). Also
# prints each command's CPU time per run (user + system, hyperfine's, children included).
# BEFORE_BIN=path runs another build beside it in the same rounds (before/after comparisons).
# PostgreSQL runs from Debian's binaries (PG_BIN) as the postgres user in a temporary folder.
# STRACE=1 counts sync and metadata syscalls per package instead (see below).
#
# Before each timed run, the work folder's filesystem is synced (so no command waits for another's
# unwritten output in its own sync), and every command's previous output is moved aside (TRASH=1,
# the default) and only removed when the script ends; TRASH=0 removes it with `rm -rf` instead.
# Every command, curl's and aria2c's included, gets the same treatment either way. Moving aside is the default
# because on ext4 without a journal (this machine's) each new inode skips every inode of its
# group freed in the last 1-6 minutes (`recently_deleted`, a scan from the start of the group per
# new inode): after `rm -rf`, a run pays for what the runs before it deleted, its own and the
# previous commands' (aria2c measured 1.0-7.6 s between runs of the same script), and the cost
# grows with the square of the inodes freed. That measures the benchmark's own deletions, not a
# tool; a prestage in production adds to a tree and removes unlisted packages a day later. TRASH=0
# stays available and its figures are reported too (docs/scaling.md): courier creates the three
# inodes a package needs in the published layout (the package, its manifest, its product folder)
# where curl creates one, so it pays that scan three times per package. For the same reason a run
# started within about six minutes of another's end (which removes its trash), or of any large
# `rm -rf` on the same filesystem, measures those removals too: leave that much time between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
COUNT=${COUNT:-500}
SIZE_KIB=${SIZE_KIB:-200}
# COURIER_BIN=path skips the release build (e.g. to measure another build).
if [ -z "${COURIER_BIN:-}" ]; then
  swift build -c release --static-swift-stdlib --product courier >&2
  BIN=$(swift build -c release --static-swift-stdlib --show-bin-path)/courier
else
  BIN=$COURIER_BIN
fi
# BENCH_DIR=folder puts the work folder (nginx's files, PostgreSQL, every command's output) there
# instead of /tmp. On this machine's journal-less ext4, /tmp shares its inode groups with every
# test run's scratch folders, whose deletions make each new inode there skip them for minutes
# (see above); a folder of its own made at the top of the filesystem (ext4 spreads those over
# the groups) measures the tools instead. docs/scaling.md reports both.
WORK=$(mktemp -d "${BENCH_DIR:-/tmp}/courier-bench-prestage.XXXXXX")
trap cleanup_work EXIT

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

start_postgres
# Courier creates its tables on a first run; then each measured run starts from an empty queue
# (a run with nothing new would fetch nothing). The reset's DELETEs leave every earlier run's rows
# dead in the tables, which autovacuum would not clear between two rounds seconds apart (each
# claim then steps over them: PostgreSQL's CPU per run rose from 0.13 to 0.36 s over a few dozen
# runs); a VACUUM after them keeps the tables as a production queue's are, where each run adds
# rows under a new run id and autovacuum clears the dead ones between runs.
"$BIN" prestage --catalog "$WORK/catalog.json" --dest "$WORK/out-first" --jobs 16 --json --queue "$PG_URL" >/dev/null
RESET_PG="${PSQL[*]} -c \"DELETE FROM prestage_task; DELETE FROM prestage_run\" -c \"VACUUM prestage_task, prestage_run\""
# BEFORE_BIN's queue runs use a database of their own: two builds of different schema versions
# cannot share one (the older refuses a database the newer migrated).
if [ -n "${BEFORE_BIN:-}" ]; then
  "${PSQL[@]}" -c "CREATE DATABASE before" >/dev/null
  BEFORE_PG_URL="${PG_URL%/*}/before"
  "$BEFORE_BIN" prestage --catalog "$WORK/catalog.json" --dest "$WORK/out-before-first" --jobs 16 --json --queue "$BEFORE_PG_URL" >/dev/null
  RESET_BEFORE_PG="${RESET_PG/ -d postgres / -d before }"
fi
# How each run's previous output goes (see the header): moved into $WORK/trash (TRASH=1, the
# default) and removed at the end, or removed at once (TRASH=0).
TRASH=${TRASH:-1}
[ "$TRASH" = 0 ] && TRASH=
mkdir -p "$WORK/trash"
cat > "$WORK/clear.sh" <<SH
# clear.sh DIR [mkdir]: removes DIR (with TRASH, moves it into $WORK/trash) and makes it again.
if [ -n "${TRASH}" ] && [ -e "\$1" ]; then mv "\$1" "$WORK/trash/\$\$"; else rm -rf "\$1"; fi
[ -z "\${2:-}" ] || mkdir -p "\$1"
sync -f "$WORK"
SH
CLEAR="sh $WORK/clear.sh"
$CLEAR "$WORK/out-first"

# STRACE=1: instead of timing, count per package the calls that sync or touch metadata
# (strace -f -c), in one process and with the queue, then stop. E.g. COUNT=100 STRACE=1.
if [ -n "${STRACE:-}" ]; then
  TRACE=fsync,fdatasync,syncfs,openat,newfstatat,statx,rename,renameat2,mkdir,unlink
  for mode in embedded queue; do
    $CLEAR "$WORK/out-strace"; sh -c "$RESET_PG"
    extra=(); [ "$mode" = queue ] && extra=(--queue "$PG_URL")
    strace -f -c -e trace=$TRACE -o "$WORK/strace-$mode.txt" \
      "$BIN" prestage --catalog "$WORK/catalog.json" --dest "$WORK/out-strace" --jobs 16 --json "${extra[@]}" >/dev/null
    python3 - "$WORK/strace-$mode.txt" "$COUNT" "$mode" <<'PY'
import sys
counts = {}
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
        counts[parts[-1]] = int(parts[3])
n = int(sys.argv[2])
print(f"{sys.argv[3]}, {n} packages: " + ", ".join(f"{k} {v} ({v / n:.2f}/pkg)" for k, v in sorted(counts.items())))
PY
  done
  exit 0
fi
# Three worker processes share the same run, JOBS3 at a time each (default 6: 18 in all).
JOBS3=${JOBS3:-6}
QUEUE3="sh -c 'for i in 1 2 3; do $BIN prestage --catalog $WORK/catalog.json --dest $WORK/out-queue3 --jobs $JOBS3 --json --queue $PG_URL --storage $WORK/st3-\$i >/dev/null & pids=\"\$pids \$!\"; done; for p in \$pids; do wait \$p || exit 1; done'"
# Rounds: each round runs every command once, in turn, so each command of a round meets the same
# load on this shared machine (hyperfine's own --runs would run all of one command, then all of the
# next, minutes apart). Round 0 is a warm-up, not counted; RUNS rounds are (default 5). Reported:
# the mean of each command over the rounds and the ratios of those means, then the median of the
# per-round ratios (each round's courier time over the same round's curl time).
# BEFORE_BIN=path adds another build's one-process and --queue runs to every round ("before"),
# for a before/after comparison in the same rounds.
BEFORE=()
if [ -n "${BEFORE_BIN:-}" ]; then
  BEFORE=(--prepare "$CLEAR $WORK/out-before"
    -n "before prestage --jobs 16" "$BEFORE_BIN prestage --catalog $WORK/catalog.json --dest $WORK/out-before --jobs 16 --json"
    --prepare "sh -c '$RESET_BEFORE_PG && $CLEAR $WORK/out-before-queue'"
    -n "before prestage --queue --jobs 16" "$BEFORE_BIN prestage --catalog $WORK/catalog.json --dest $WORK/out-before-queue --jobs 16 --json --queue $BEFORE_PG_URL")
fi
COURIER=(--prepare "$CLEAR $WORK/out-courier"
  -n "courier prestage --jobs 16" "$BIN prestage --catalog $WORK/catalog.json --dest $WORK/out-courier --jobs 16 --json"
  --prepare "sh -c '$RESET_PG && $CLEAR $WORK/out-queue'"
  -n "courier prestage --queue --jobs 16" "$BIN prestage --catalog $WORK/catalog.json --dest $WORK/out-queue --jobs 16 --json --queue $PG_URL")
for round in $(seq 0 "${RUNS:-5}"); do
# The build and BEFORE_BIN's take turns going first: the first command of a round measured up
# to 15% slower than the same build second (a before/after pair of one build differed that much).
if [ $((round % 2)) = 0 ]; then FIRST=("${COURIER[@]}" "${BEFORE[@]}"); else FIRST=("${BEFORE[@]}" "${COURIER[@]}"); fi
hyperfine -N --runs 1 --export-json "$WORK/prestage-$round.json" "${FIRST[@]}" \
  --prepare "sh -c '$RESET_PG && $CLEAR $WORK/out-queue3'" \
  -n "courier prestage --queue, 3 workers" "$QUEUE3" \
  --prepare "$CLEAR $WORK/out-aria2 mkdir" \
  -n "aria2c -j16" "aria2c -q -j16 -x1 --allow-overwrite=true --auto-file-renaming=false -d $WORK/out-aria2 -i $WORK/urls.txt" \
  --prepare "$CLEAR $WORK/out-curl mkdir" \
  -n "xargs curl" "sh -c 'cd $WORK/out-curl && xargs -P16 -n50 curl -s --remote-name-all < $WORK/urls.txt'" >&2
done
# BIG=0 stops here (the round table only): a shorter run, for before/after comparisons.
BIG_COUNT=${BIG_COUNT:-64}
BIG_MIB=${BIG_MIB:-8}
BIG_JOBS=${BIG_JOBS:-8}
if [ "${BIG:-1}" != 0 ]; then
# Idempotent second run: nothing new to fetch.
hyperfine -N --runs 5 --export-json "$WORK/again.json" \
  -n "prestage again" "$BIN prestage --catalog $WORK/catalog.json --dest $WORK/out-courier --jobs 16 --json" >&2

# One worker against three on bigger packages: the same catalog, one PostgreSQL queue.
echo "making $BIG_COUNT packages of ${BIG_MIB} MiB..." >&2
mkdir -p "$WORK/upstream/big"
python3 - "$WORK" "$BIG_COUNT" "$BIG_MIB" "$BASE" <<'PY'
import hashlib, json, os, subprocess, sys
work, count, size_mib, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
products, urls = [], []
for i in range(count):
    pid = f"com.example.big{i:04d}"
    root = os.path.join(work, "src", pid)
    os.makedirs(os.path.join(root, "Contents"), exist_ok=True)
    with open(os.path.join(root, "ContentInfo.plist"), "w") as f:
        f.write(f'<?xml version="1.0" encoding="UTF-8"?><plist version="1.0"><dict><key>ContentVersion</key><string>1.0</string>'
                f'<key>IAPProductIdentifier</key><string>{pid}</string></dict></plist>\n')
    with open(os.path.join(root, "Contents", "data.bin"), "wb") as f:
        f.write(os.urandom(size_mib << 20))
    out = os.path.join(work, "upstream", "big", f"{pid}.zip")
    subprocess.run(["zip", "-q", "-X", "-0", "-r", out, "ContentInfo.plist", "Contents"], cwd=root, check=True)
    h = hashlib.sha256()
    with open(out, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""): h.update(chunk)
    products.append({"productId": pid, "content": {"url": f"{base}/big/{pid}.zip", "sha256": h.hexdigest(),
                     "length": os.path.getsize(out), "version": "1.0", "placement": "cache"}})
    urls.append(f"{base}/big/{pid}.zip")
json.dump({"bundleId": "com.example.app", "products": products}, open(os.path.join(work, "big.json"), "w"))
open(os.path.join(work, "big-urls.txt"), "w").write("\n".join(urls) + "\n")
PY
ONE="$BIN prestage --catalog $WORK/big.json --dest $WORK/out-big --jobs $BIG_JOBS --json --queue $PG_URL"
# Three worker processes on the same run; the command ends when all three have.
THREE="sh -c 'for i in 1 2 3; do $ONE --storage $WORK/st\$i >/dev/null & pids=\"\$pids \$!\"; done; for p in \$pids; do wait \$p || exit 1; done'"
hyperfine -N --runs "${BIG_RUNS:-3}" --export-json "$WORK/workers.json" \
  --prepare "sh -c '$RESET_PG && $CLEAR $WORK/out-big'" -n "1 worker" "$ONE" \
  --prepare "sh -c '$RESET_PG && $CLEAR $WORK/out-big'" -n "3 workers" "$THREE" \
  --prepare "$CLEAR $WORK/out-bigcurl mkdir" \
  -n "xargs curl big" "sh -c 'cd $WORK/out-bigcurl && xargs -P$BIG_JOBS -n4 curl -s --remote-name-all < $WORK/big-urls.txt'" >&2
fi

python3 - "$WORK/prestage" "$WORK/again.json" "$COUNT" "$SIZE_KIB" "$WORK/workers.json" "$BIG_COUNT" "$BIG_MIB" "$BIG_JOBS" "$TRASH" <<'PY'
import glob, json, os, statistics, sys
rounds, cpus = [], []
for path in sorted(glob.glob(sys.argv[1] + "-*.json"), key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0])):
    if path.endswith("-0.json"): continue  # the warm-up round
    results = json.load(open(path))["results"]
    rounds.append({x["command"]: x["mean"] for x in results})
    cpus.append({x["command"]: (x["user"], x["system"]) for x in results})
r = {name: statistics.mean(x[name] for x in rounds) for name in rounds[0]}
def per_round(name):
    ratios = [x[name] / x["xargs curl"] for x in rounds]
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
courier, queue, aria, curl = r["courier prestage --jobs 16"], r["courier prestage --queue --jobs 16"], r["aria2c -j16"], r["xargs curl"]
queue3 = r["courier prestage --queue, 3 workers"]
print("previous output: " + ("moved aside (TRASH=1)" if sys.argv[9] else "removed with rm -rf (TRASH=0)"))
print(f"prestage {sys.argv[3]} x {sys.argv[4]} KiB: courier {courier:.3f} s, with the PostgreSQL queue {queue:.3f} s "
      f"(3 workers: {queue3:.3f} s), aria2c {aria:.3f} s, xargs curl {curl:.3f} s")
print(f"courier/curl = {courier/curl:.2f}, queue/curl = {queue/curl:.2f}, 3 workers/curl = {queue3/curl:.2f} (goal <= 2.5); "
      f"courier/aria2c = {courier/aria:.2f}")
print(f"median of {len(rounds)} per-round ratios to curl (range): courier {per_round('courier prestage --jobs 16')}, "
      f"queue {per_round('courier prestage --queue --jobs 16')}, 3 workers {per_round('courier prestage --queue, 3 workers')}")
cpu = {name: [statistics.mean(x[name][i] for x in cpus) for i in (0, 1)] for name in cpus[0]}
named = [("courier", "courier prestage --jobs 16"), ("queue", "courier prestage --queue --jobs 16"),
         ("3 workers", "courier prestage --queue, 3 workers"), ("aria2c", "aria2c -j16"), ("curl", "xargs curl")]
if "before prestage --jobs 16" in r:
    before, before_queue = r["before prestage --jobs 16"], r["before prestage --queue --jobs 16"]
    print(f"before (BEFORE_BIN): courier {before:.3f} s ({before/curl:.2f}x), queue {before_queue:.3f} s ({before_queue/curl:.2f}x); "
          f"median per-round ratio courier {per_round('before prestage --jobs 16')}, queue {per_round('before prestage --queue --jobs 16')}")
    named += [("before", "before prestage --jobs 16"), ("before queue", "before prestage --queue --jobs 16")]
    # Paired: each round's time over the same round's BEFORE_BIN time (what the shared machine's
    # load does to both cancels out better than in either ratio to curl).
    def paired(name, base):
        ratios = [x[name] / x[base] for x in rounds]
        return f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})"
    print(f"this build over BEFORE_BIN, median of the per-round ratios (range): courier "
          f"{paired('courier prestage --jobs 16', 'before prestage --jobs 16')}, queue "
          f"{paired('courier prestage --queue --jobs 16', 'before prestage --queue --jobs 16')}")
print("CPU per run (user + system, mean of the rounds; user in parentheses): " + ", ".join(
    f"{short} {cpu[name][0] + cpu[name][1]:.3f} s ({cpu[name][0]:.3f})" for short, name in named))
if not os.path.exists(sys.argv[2]): sys.exit(0)  # BIG=0
again = json.load(open(sys.argv[2]))["results"][0]["mean"]
print(f"second run with nothing new: {again:.3f} s")
w = {x["command"]: x["mean"] for x in json.load(open(sys.argv[5]))["results"]}
one, three, bigcurl = w["1 worker"], w["3 workers"], w["xargs curl big"]
print(f"{sys.argv[6]} x {sys.argv[7]} MiB, --jobs {sys.argv[8]} per worker: 1 worker {one:.3f} s, 3 workers {three:.3f} s "
      f"(speed-up {one/three:.2f}x), xargs -P{sys.argv[8]} curl {bigcurl:.3f} s (1 worker/curl = {one/bigcurl:.2f}, 3/curl = {three/bigcurl:.2f})")
PY
