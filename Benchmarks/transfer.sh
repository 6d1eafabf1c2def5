#!/usr/bin/env bash
# Transfer benchmarks (not a test): courier get against curl and aria2c, nginx on loopback.
# Prints wall-time ratios (courier / other; below 1.0 means courier is faster) and peak RSS.
#   Benchmarks/transfer.sh            # full run: 512 MiB, 500 x 200 KiB
#   BIG_MIB=64 RUNS=3 Benchmarks/transfer.sh   # a quicker run
#   COURIER_BIN=.build/release/courier Benchmarks/transfer.sh   # reuse a release binary
#   RSS_ONLY=1 SMALL_MIB=64 Benchmarks/transfer.sh   # only peak RSS (get vs curl vs aria2c),
#                                                    # with where get's resident pages are
#   VERIFIED_ONLY=1 BIG_MIB=256 Benchmarks/transfer.sh   # only the verified-download ratios:
#       on tmpfs (TMPFS, default /dev/shm) courier get --sha256 vs curl vs aria2c --checksum
#       (goal: get <= 1.3x curl), on disk get vs `curl && sync` (goal: not slower)
set -euo pipefail

cd "$(dirname "$0")/.."
source Benchmarks/common.sh
BIG_MIB=${BIG_MIB:-512}
SMALL_MIB=${SMALL_MIB:-32}
FILES=${FILES:-500}
RUNS=${RUNS:-5}
NGINX=${NGINX:-/usr/sbin/nginx}

if [[ -n "${COURIER_BIN:-}" ]]; then
    BIN="$COURIER_BIN"   # reuse a built binary (a release build takes long on 2 cores)
else
    echo "== building release"
    build_release
fi
echo "== courier: $BIN"

WORK=$(mktemp -d /tmp/courier-bench.XXXXXX)
NGINX_PID=""
cleanup() {
    if [[ -n "$NGINX_PID" ]]; then kill "$NGINX_PID" 2>/dev/null || true; wait "$NGINX_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/site/small" "$WORK/out" "$WORK/nginx"

echo "== making test data in $WORK"
head -c "$((BIG_MIB << 20))" /dev/urandom > "$WORK/site/big.bin"
head -c "$((SMALL_MIB << 20))" /dev/urandom > "$WORK/site/small.bin"
head -c "$((FILES * 200 * 1024))" /dev/urandom > "$WORK/all-small"
(cd "$WORK/site/small" && split -b 204800 -d -a 4 "$WORK/all-small" f && rm -f "$WORK/all-small")
BIG_SHA=$(sha256sum "$WORK/site/big.bin" | cut -d' ' -f1)
SMALL_SHA=$(sha256sum "$WORK/site/small.bin" | cut -d' ' -f1)

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
USER_LINE=""; [[ $(id -u) == 0 ]] && USER_LINE="user root;"
cat > "$WORK/nginx/nginx.conf" <<CONF
$USER_LINE
worker_processes 2;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx/cb; proxy_temp_path $WORK/nginx/p;
    fastcgi_temp_path $WORK/nginx/f; uwsgi_temp_path $WORK/nginx/u; scgi_temp_path $WORK/nginx/s;
    default_type application/octet-stream;
    sendfile on; tcp_nopush on;
    keepalive_requests 100000;
    server { listen 127.0.0.1:$PORT; root $WORK/site; }
}
CONF
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" -e "$WORK/nginx/error.log" &
NGINX_PID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/small.bin" && break; sleep 0.1; done
BASE="http://127.0.0.1:$PORT"
ls "$WORK/site/small" | sed "s|^|$BASE/small/|" > "$WORK/list.txt"

ratio() {  # ratio JSON: mean of command 0 / mean of command 1, with both means
    python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
a, b = r[0]["mean"], r[1]["mean"]
print(f"  courier {a:.3f} s ± {r[0]['stddev']:.3f}   other {b:.3f} s ± {r[1]['stddev']:.3f}   ratio {a / b:.2f}")
PY
}

TMPFS=${TMPFS:-/dev/shm}
if [[ -z "${RSS_ONLY:-}" && -d "$TMPFS" ]]; then
    SHM=$(mktemp -d "$TMPFS/courier-bench.XXXXXX")
    trap 'cleanup; rm -rf "$SHM"' EXIT
    echo "== ${BIG_MIB} MiB to tmpfs ($TMPFS), paired in one run: courier get --sha256 vs curl -s -o vs aria2c --checksum"
    hyperfine -N -w 1 -r "$RUNS" --export-json "$WORK/tmpfs.json" \
        --prepare "rm -rf $SHM/big.bin $SHM/big.bin.courier-part $SHM/big.bin.courier-journal $SHM/big.bin.aria2" \
        -n "courier get --sha256" "$BIN get $BASE/big.bin -o $SHM/big.bin --sha256 $BIG_SHA" \
        -n "curl" "curl -s -o $SHM/big.bin $BASE/big.bin" \
        -n "aria2c --checksum" "aria2c -q --allow-overwrite=true --auto-file-renaming=false --checksum=sha-256=$BIG_SHA -d $SHM -o big.bin $BASE/big.bin" \
        > /dev/null
    python3 - "$WORK/tmpfs.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
get, curl, aria = r["courier get --sha256"], r["curl"], r["aria2c --checksum"]
for name, x in (("courier get --sha256", get), ("curl", curl), ("aria2c --checksum", aria)):
    print(f"  {name:22s} {x['mean']:.3f} s ± {x['stddev']:.3f}  (user {x['user']:.3f} s, system {x['system']:.3f} s)")
ratio = get["mean"] / curl["mean"]
print(f"  ratio get/curl {ratio:.2f} (goal <= 1.3: {'met' if ratio <= 1.3 else 'NOT MET'}), get/aria2c {get['mean'] / aria['mean']:.2f}")
PY
    echo "== ${BIG_MIB} MiB to disk ($WORK), paired: courier get --sha256 (fsyncs the file) vs curl && sync"
    hyperfine -N -w 1 -r "$RUNS" --export-json "$WORK/disk.json" \
        --prepare "rm -rf $WORK/out/big.bin $WORK/out/big.bin.courier-part $WORK/out/big.bin.courier-journal" \
        -n "courier get --sha256" "$BIN get $BASE/big.bin -o $WORK/out/big.bin --sha256 $BIG_SHA" \
        -n "curl && sync" "bash -c 'curl -s -o $WORK/out/big.bin $BASE/big.bin && sync'" > /dev/null
    ratio "$WORK/disk.json"
    rm -rf "$SHM"
fi
if [[ -n "${VERIFIED_ONLY:-}" ]]; then exit 0; fi

if [[ -z "${RSS_ONLY:-}" ]]; then
    echo "== ${BIG_MIB} MiB: courier get --sha256 vs curl -s -o"
    hyperfine -N -w 1 -r "$RUNS" --export-json "$WORK/big.json" \
        --prepare "rm -rf $WORK/out/big.bin $WORK/out/big.bin.courier-part $WORK/out/big.bin.courier-journal" \
        "$BIN get $BASE/big.bin -o $WORK/out/big.bin --sha256 $BIG_SHA" \
        "curl -s -o $WORK/out/big.bin $BASE/big.bin" > /dev/null
    ratio "$WORK/big.json"

    echo "== $FILES x 200 KiB, 16 at a time: courier get --input-file -j16 vs aria2c -j16"
    hyperfine -w 1 -r "$RUNS" --export-json "$WORK/aria.json" \
        --prepare "rm -rf $WORK/many && mkdir -p $WORK/many" \
        "$BIN get --input-file $WORK/list.txt -d $WORK/many -j 16" \
        "aria2c -q -j16 -i $WORK/list.txt -d $WORK/many" > /dev/null
    ratio "$WORK/aria.json"

    echo "== $FILES x 200 KiB, 16 at a time: courier get --input-file -j16 vs xargs -P16 -n50 curl -s --remote-name-all"
    hyperfine -w 1 -r "$RUNS" --export-json "$WORK/xargs.json" \
        --prepare "rm -rf $WORK/many && mkdir -p $WORK/many" \
        "$BIN get --input-file $WORK/list.txt -d $WORK/many -j 16" \
        "cd $WORK/many && xargs -P16 -n50 curl -s --remote-name-all < $WORK/list.txt" > /dev/null
    ratio "$WORK/xargs.json"
fi

echo "== peak RSS (GNU time's maximum resident set size, one run each): courier get vs curl vs aria2c"
RSS_MISSED=""
mib() { python3 -c "import sys; print(f'{int(sys.argv[1]) / 1024:.1f}')" "$1"; }
for name in big small; do
    sha=$BIG_SHA; [[ $name == small ]] && sha=$SMALL_SHA
    out="$WORK/out/$name.bin"
    rm -f "$out"*
    courier=$(peak_rss_kib "$BIN" get "$BASE/$name.bin" -o "$out" --sha256 "$sha")
    rm -f "$out"*
    curl=$(peak_rss_kib curl -s -o "$out" "$BASE/$name.bin")
    rm -f "$out"*
    aria=$(peak_rss_kib aria2c -q --allow-overwrite=true --auto-file-renaming=false --checksum="sha-256=$sha" \
        -d "$WORK/out" -o "$name.bin" "$BASE/$name.bin")
    size=$(stat -c %s "$WORK/site/$name.bin")
    verdict="goal <= 40 MiB met"
    if (( courier > 40 * 1024 )); then verdict="goal <= 40 MiB NOT MET"; RSS_MISSED=1; fi
    echo "  $((size >> 20)) MiB file: courier get $(mib "$courier") MiB ($verdict), curl $(mib "$curl") MiB, aria2c $(mib "$aria") MiB"
done
echo "== where courier get's resident memory is (${BIG_MIB} MiB file)"
rm -f "$WORK/out/big.bin"*
"$BIN" get "$BASE/big.bin" -o "$WORK/out/big.bin" --sha256 "$BIG_SHA" > /dev/null &
GET_PID=$!
rss_profile "$GET_PID" "$WORK/out/big.bin.courier-part" "$(stat -c %s "$WORK/site/big.bin")"
wait "$GET_PID"
# A release binary over the goal fails the run (a debug binary maps far more code: not a verdict).
if [[ -n "${RSS_MISSED:-}" && "$BIN" != */debug/* ]]; then exit 1; fi
