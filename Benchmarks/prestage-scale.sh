#!/usr/bin/env bash
# The PostgreSQL queue at scale: RUNS pre-staging runs of COUNT small packages (SIZE_KIB each,
# default 20,000 of 2 KiB), one after another into ONE database, as a daily prestage job's runs
# pile up in production (each run has its own run id; published runs are kept a week). Each run
# stages into a fresh folder, so every run claims, fetches and records all COUNT tasks. Prints
# per run: the wall time, and PostgreSQL's statement time (pg_stat_statements) for the claims and
# the records with their counts and mean. What this measures is the queue's statements as a run
# and the table grow, not the transfers: the packages are small and nginx is on loopback.
#
# BEFORE_BIN=path runs another build's RUNS runs too, in a database of its own, taking turns run
# by run (before/after comparisons; builds of different schema versions cannot share one).
#
#   Benchmarks/prestage-scale.sh    (COUNT, SIZE_KIB, RUNS=3, JOBS=16, COURIER_BIN, BEFORE_BIN, BENCH_DIR, ANALYZE=mid|between|auto)
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
COUNT=${COUNT:-20000}
SIZE_KIB=${SIZE_KIB:-2}
RUNS=${RUNS:-3}
JOBS=${JOBS:-16}
if [ -z "${COURIER_BIN:-}" ]; then build_release; else BIN=$COURIER_BIN; fi
WORK=$(mktemp -d "${BENCH_DIR:-/tmp}/courier-bench-scale.XXXXXX")
trap cleanup_work EXIT

mkdir -p "$WORK/upstream"
start_nginx "$WORK/upstream" "$WORK"
echo "making $COUNT packages of $SIZE_KIB KiB (Python's zipfile, stored)..." >&2
python3 - "$WORK" "$COUNT" "$SIZE_KIB" "http://127.0.0.1:$NGINX_PORT" <<'PY'
import hashlib, io, json, os, sys, zipfile
work, count, size_kib, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
products = []
for i in range(count):
    pid = f"com.example.small{i:06d}"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        z.writestr("ContentInfo.plist", f'''<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0"><dict><key>ContentVersion</key><string>1.0</string><key>IAPProductIdentifier</key><string>{pid}</string></dict></plist>
''')
        z.writestr("Contents/data.bin", os.urandom(max(0, size_kib * 1024 - 600)))
    data = buffer.getvalue()
    open(os.path.join(work, "upstream", f"{pid}.zip"), "wb").write(data)
    products.append({"productId": pid, "content": {"url": f"{base}/{pid}.zip", "sha256": hashlib.sha256(data).hexdigest(),
                     "length": len(data), "version": "1.0", "placement": "cache"}})
json.dump({"bundleId": "com.example.app", "products": products}, open(os.path.join(work, "catalog.json"), "w"))
PY

EXTRA_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements" start_postgres
PG_BASE=${PG_URL%/*}
BUILDS=("after:$BIN")
[ -n "${BEFORE_BIN:-}" ] && BUILDS=("before:$BEFORE_BIN" "${BUILDS[@]}")
for build in "${BUILDS[@]}"; do
  name=${build%%:*}
  "${PSQL[@]}" -c "CREATE DATABASE $name" >/dev/null
  runuser -u postgres -- "$PG_BIN/psql" "$PG_BASE/$name" -X -q -c "CREATE EXTENSION pg_stat_statements" >/dev/null
done
# Outputs stay until the end: on this machine's journal-less ext4, deleting 20,000 files makes the
# next run's new inodes slower for minutes (see Benchmarks/prestage.sh), which would charge one
# build for the other's deletions. The builds take turns going first.
for run in $(seq 1 "$RUNS"); do
  order=("${BUILDS[@]}")
  if [ $((run % 2)) = 0 ] && [ ${#BUILDS[@]} = 2 ]; then order=("${BUILDS[1]}" "${BUILDS[0]}"); fi
  for build in "${order[@]}"; do
    name=${build%%:*} bin=${build#*:}
    psql_db=(runuser -u postgres -- "$PG_BIN/psql" "$PG_BASE/$name" -X -q -A -t)
    # When PostgreSQL's statistics are taken decides the plans (see docs/scaling.md). ANALYZE=mid
    # (the default): once half of each run is staged, the table is analyzed, as autovacuum (it
    # looks every minute) does during any run longer than that; the next run then starts with
    # statistics of a run in progress. ANALYZE=between: vacuumed and analyzed before each run, as
    # between runs hours apart. ANALYZE=auto: autovacuum alone, whenever it comes.
    case "${ANALYZE:-mid}" in
      between) [ "$run" = 1 ] || "${psql_db[@]}" -c "VACUUM ANALYZE prestage_task, prestage_run" >/dev/null ;;
      mid)
        ( for _ in $(seq 600); do
            staged=$("${psql_db[@]}" -c "SELECT count(*) FROM prestage_task WHERE state = 'staged'
              AND run_id = (SELECT max(run_id) FROM prestage_run WHERE state = 'running')" 2>/dev/null || echo 0)
            [ "${staged:-0}" -ge $((COUNT / 2)) ] && { "${psql_db[@]}" -c "ANALYZE prestage_task" >/dev/null; break; }
            sleep 0.2
          done ) &
        analyzer=$!
        ;;
    esac
    "${psql_db[@]}" -c "SELECT pg_stat_statements_reset()" >/dev/null
    sync -f "$WORK"
    start=$(date +%s.%N)
    "$bin" prestage --catalog "$WORK/catalog.json" --dest "$WORK/out-$name-$run" --jobs "$JOBS" --json \
      --queue "$PG_BASE/$name" --storage "$WORK/storage-$name" >/dev/null
    end=$(date +%s.%N)
    if [ -n "${analyzer:-}" ]; then kill "$analyzer" 2>/dev/null || true; wait "$analyzer" 2>/dev/null || true; analyzer=; fi
    stats=$("${psql_db[@]}" -F ' ' -c "
      SELECT coalesce(round(sum(total_exec_time) FILTER (WHERE query LIKE '%FOR UPDATE SKIP LOCKED%')), 0),
             coalesce(sum(calls) FILTER (WHERE query LIKE '%FOR UPDATE SKIP LOCKED%'), 0),
             coalesce(round(sum(total_exec_time) FILTER (WHERE query LIKE '%WITH recorded AS%')), 0),
             coalesce(sum(calls) FILTER (WHERE query LIKE '%WITH recorded AS%'), 0),
             coalesce(round(sum(total_exec_time) FILTER (WHERE query NOT LIKE 'ANALYZE%')), 0)
      FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())")
    python3 - "$name" "$run" "$start" "$end" $stats <<'PY'
import sys
name, run, start, end = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
claims_ms, claims, records_ms, records, total_ms = map(float, sys.argv[5:10])
mean = lambda ms, n: f"{ms / n:.2f} ms each" if n else "none"
print(f"{name} run {run}: {end - start:.2f} s; PostgreSQL statements {total_ms / 1000:.2f} s: "
      f"claims {claims_ms / 1000:.2f} s ({int(claims)}, {mean(claims_ms, claims)}), "
      f"records {records_ms / 1000:.2f} s ({int(records)}, {mean(records_ms, records)})")
PY
  done
done
