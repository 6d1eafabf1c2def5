# Shared helpers for the benchmarks: nginx on a free loopback port, cleanup, JSON ratios.
# shellcheck shell=bash
export PATH="/opt/swift/usr/bin:$PATH"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# start_nginx ROOT WORKDIR [ACCESS_LOG] -> sets NGINX_PORT and NGINX_PID. With ACCESS_LOG, each
# request is logged there as "URI STATUS BODY_BYTES_SENT" (what a client fetched).
start_nginx() {
  local root=$1 work=$2 access="access_log off;"
  [ -n "${3:-}" ] && access="log_format bytes '\$request_uri \$status \$body_bytes_sent'; access_log $3 bytes;"
  NGINX_PORT=$(free_port)
  local user=""; [ "$(id -u)" -eq 0 ] && user="user root;"
  cat > "$work/nginx.conf" <<CONF
$user
worker_processes 1;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 1024; }
http {
    $access
    client_body_temp_path $work/cb; proxy_temp_path $work/px; fastcgi_temp_path $work/fc;
    uwsgi_temp_path $work/uw; scgi_temp_path $work/sc;
    types { application/zip zip; application/json json; }
    default_type application/octet-stream;
    sendfile on; tcp_nopush on;
    keepalive_requests 100000;
    server { listen 127.0.0.1:$NGINX_PORT; root $root; }
}
CONF
  /usr/sbin/nginx -c "$work/nginx.conf" -p "$work" -e "$work/nginx-error.log" >/dev/null 2>&1 &
  NGINX_PID=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$NGINX_PORT/" && return 0; sleep 0.05; done
  echo "nginx did not start" >&2; return 1
}

# mean seconds of command N (0-based) in a hyperfine JSON export
mean_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['results'][int(sys.argv[2])]['mean'])" "$1" "$2"; }

# build_release -> sets BIN to the release `courier`, built as README says: the Swift runtime and
# Foundation linked statically, lld with packed relocations (docs/transfer.md "Memory").
build_release() {
  swift build -c release --static-swift-stdlib --product courier 2>&1 | grep -E 'error|warning: |Build' | tail -3 >&2
  BIN="$(swift build -c release --static-swift-stdlib --show-bin-path)/courier"
  [ -x "$BIN" ] || { echo "the release build failed" >&2; return 1; }
}

# peak_rss_kib CMD... -> prints the command's peak RSS in KiB (GNU time's maximum resident set
# size: the kernel's VmHWM, what `/usr/bin/time -v` shows a user); its output is discarded.
peak_rss_kib() {
  local out; out=$(mktemp)
  /usr/bin/time -f "%M" -o "$out" "$@" >/dev/null 2>&1 || { rm -f "$out"; echo "failed: $*" >&2; return 1; }
  tail -n 1 "$out"; rm -f "$out"
}

# rss_profile PID FILE SIZE -> while PID runs, samples /proc/PID/status every 10 ms; once FILE
# holds SIZE/2 bytes, prints what is resident per mapping (smaps Rss, summed by file; anonymous
# memory apart), and at the end the last VmHWM seen (the peak, sampled from outside).
rss_profile() {
  python3 - "$@" <<'PY'
import os, sys, time
pid, path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
hwm, dumped = None, False
def kib(line): return int(line.split()[1])
while os.path.exists(f"/proc/{pid}"):
    try:
        status = open(f"/proc/{pid}/status").read().splitlines()
    except OSError:
        break
    fields = {l.split(":")[0]: l for l in status if ":" in l}
    if "VmHWM" not in fields: break  # exited (a zombie has no memory)
    hwm = fields["VmHWM"]
    try: grown = os.path.getsize(path) >= size // 2
    except OSError: grown = False
    if grown and not dumped:
        dumped = True
        per, name = {}, None
        try:
            for line in open(f"/proc/{pid}/smaps"):
                head = line.split()
                if "-" in head[0] and not head[0].endswith(":"):
                    name = os.path.basename(head[5]) if len(head) > 5 else "[anonymous]"
                elif head[0] == "Rss:":
                    per[name] = per.get(name, 0) + int(head[1])
        except OSError:
            pass
        print("  at half the file:", ", ".join(f"{k} {kib(fields[k]) / 1024:.1f} MiB" for k in ("VmRSS", "RssAnon", "RssFile") if k in fields))
        for name, rss in sorted(per.items(), key=lambda kv: -kv[1])[:14]:
            print(f"    {rss / 1024:6.1f} MiB  {name}")
    time.sleep(0.01)
if hwm: print(f"  last VmHWM sampled: {kib(hwm) / 1024:.1f} MiB")
if not dumped: print("  (the download ended before half the file could be sampled: use a bigger file)")
PY
}

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}

# cleanup_work -> the EXIT trap of a benchmark with a $WORK folder: stops its nginx and its
# PostgreSQL (when started), then removes $WORK.
cleanup_work() {
  [ -n "${NGINX_PID:-}" ] && kill "$NGINX_PID" 2>/dev/null
  [ -d "$WORK/pg" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$WORK/pg" stop -m immediate >/dev/null 2>&1
  wait 2>/dev/null; rm -rf "$WORK"
}

# start_postgres -> sets PG_URL and PSQL (a psql command line): PostgreSQL from Debian's binaries
# (PG_BIN) in $WORK/pg, on a free loopback port. It refuses root, so it runs as postgres (runuser).
# EXTRA_PG_OPTIONS: more server options (e.g. "-c shared_preload_libraries=pg_stat_statements").
start_postgres() {
  chmod 755 "$WORK"; mkdir "$WORK/pg" "$WORK/pglog"; chown postgres:postgres "$WORK/pg" "$WORK/pglog"; chmod 700 "$WORK/pg"
  runuser -u postgres -- "$PG_BIN/initdb" -D "$WORK/pg" -U postgres -A trust -E UTF8 --locale=C --no-sync >/dev/null
  local port; port=$(free_port)
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pglog/postgres.log" -w start \
    -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c max_connections=300 ${EXTRA_PG_OPTIONS:-}" >/dev/null
  PG_URL="postgresql://postgres@127.0.0.1:$port/postgres"
  PSQL=(runuser -u postgres -- "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -d postgres -X -q)
}
