#!/usr/bin/env bash
# nginx + auth_request + `courier serve` gates vs nginx alone, serving the same files to wrk with
# 64 connections, in the same run (release build): whole files and 1 MiB ranges of a bigger one.
# nginx is configured with what `courier origin nginx-config` prints, twice: with its decision
# cache (`--decision-cache`, DECISION_CACHE seconds, default 2) and without (`--decision-cache 0`);
# every request carries a signed transaction (64 distinct purchases, so the gates' token cache
# holds 64 entries and nginx's decision cache 64 keys per file).
# Prints requests/s of each, the throughput ratio gated/alone (goal >= 0.8), wrk's p99 latency,
# the gates' p99 decision time from their courier_gate_decision_seconds histograms (for each
# gated run: what the gates were asked during it), the load average, and the CPU time nginx's
# worker (and the gates) spent per request: what bounds the requests one core serves. On a
# machine other work keeps busy, req/s of one run swing by tens of percent; CPU per request
# swings less (the copies still compete for caches and memory), so compare several runs.
#   Benchmarks/gate.sh
#   COURIER_BIN=.build/debug/courier DURATION=3 BIG_MIB=16 Benchmarks/gate.sh   # a quick check
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
DURATION=${DURATION:-10}       # seconds per wrk run
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
GATES=${GATES:-2}              # courier serve gate processes behind nginx
WHOLE_KIB=${WHOLE_KIB:-256}    # the file fetched whole
BIG_MIB=${BIG_MIB:-64}         # the file fetched in 1 MiB ranges
TOKENS=${TOKENS:-64}
DECISION_CACHE=${DECISION_CACHE:-2}  # seconds nginx reuses a gate's decision in the cached run

if ! command -v wrk >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "== installing wrk" >&2
  { $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q wrk; } >/dev/null 2>&1 \
    || { echo "gate.sh: cannot install wrk" >&2; exit 1; }
fi
if [ -z "${COURIER_BIN:-}" ]; then
  swift build -c release --static-swift-stdlib --product courier >&2
  BIN=$(swift build -c release --static-swift-stdlib --show-bin-path)/courier
else
  BIN=$(realpath "$COURIER_BIN")
fi
WORK=$(mktemp -d /tmp/courier-bench-gate.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -n "${NGINX_PID:-}" ] && kill "$NGINX_PID" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# The content: one product whose package is the big file, one whose package is the whole file.
mkdir -p "$WORK/content/packages/com.example.big" "$WORK/content/packages/com.example.whole"
head -c "$((BIG_MIB << 20))" /dev/urandom > "$WORK/big.zip"
head -c "$((WHOLE_KIB << 10))" /dev/urandom > "$WORK/whole.zip"
BIG_SHA=$(sha256sum "$WORK/big.zip" | cut -d' ' -f1)
WHOLE_SHA=$(sha256sum "$WORK/whole.zip" | cut -d' ' -f1)
BIG="packages/com.example.big/$BIG_SHA.zip"
WHOLE="packages/com.example.whole/$WHOLE_SHA.zip"
mv "$WORK/big.zip" "$WORK/content/$BIG"
mv "$WORK/whole.zip" "$WORK/content/$WHOLE"
cat > "$WORK/content/catalog.json" <<JSON
{"bundleId":"com.example.app","products":[
 {"productId":"com.example.big","content":{"url":"$BIG","sha256":"$BIG_SHA","length":$((BIG_MIB << 20)),"version":"1.0","placement":"documents"}},
 {"productId":"com.example.whole","content":{"url":"$WHOLE","sha256":"$WHOLE_SHA","length":$((WHOLE_KIB << 10)),"version":"1.0","placement":"documents"}}]}
JSON
cat "$WORK/content/$BIG" "$WORK/content/$WHOLE" > /dev/null   # warm the page cache

# Signed purchases of both products (a token for each, TOKENS of each).
"$BIN" sandbox init --dir "$WORK/sandbox" > /dev/null
for product in big whole; do
  for _ in $(seq "$TOKENS"); do
    "$BIN" sandbox purchase "com.example.$product" --dir "$WORK/sandbox" --bundle-id com.example.app
  done > "$WORK/tokens-$product"
done

# The gates.
GATE_ARGS=(); GATE_PIDS=()
for i in $(seq "$GATES"); do
  "$BIN" serve --content "$WORK/content" --port 0 --json --metrics-port 0 --storage "$WORK/storage" \
    --trust-root "$WORK/sandbox" --bundle-id com.example.app --environment Sandbox > "$WORK/gate$i.log" 2>"$WORK/gate$i.err" &
  PIDS+=($!); GATE_PIDS+=($!)
done
port_of() {  # port_of LOG EVENT
  for _ in $(seq 400); do
    grep -q "\"$2\"" "$1" 2>/dev/null && break
    sleep 0.05
  done
  python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and json.loads(l).get("event")==sys.argv[2]][0]["port"])' "$1" "$2"
}
METRICS_PORTS=()
for i in $(seq "$GATES"); do
  GATE_ARGS+=(--gate "127.0.0.1:$(port_of "$WORK/gate$i.log" listening)")
  METRICS_PORTS+=("$(port_of "$WORK/gate$i.log" metrics)")
done

# nginx alone (Benchmarks/common.sh) and nginx with the printed configuration, same main context.
mkdir -p "$WORK/plain"
start_nginx "$WORK/content" "$WORK/plain"
PLAIN_PORT=$NGINX_PORT; PLAIN_MASTER=$NGINX_PID; PIDS+=("$NGINX_PID"); NGINX_PID=""

# gated_nginx NAME CACHE_SECONDS: starts nginx with the printed configuration; sets GATED_PORT.
gated_nginx() {
  local dir="$WORK/$1" port
  mkdir -p "$dir"
  port=$(free_port)
  "$BIN" origin nginx-config --content "$WORK/content" "${GATE_ARGS[@]}" --listen "127.0.0.1:$port" \
    --decision-cache "$2" --decision-cache-path "$dir/decisions" > "$dir/courier.conf"
  cat > "$dir/nginx.conf" <<CONF
$user
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $dir/cb; proxy_temp_path $dir/px; fastcgi_temp_path $dir/fc;
    uwsgi_temp_path $dir/uw; scgi_temp_path $dir/sc;
    keepalive_requests 100000;
    include $dir/courier.conf;
}
CONF
  /usr/sbin/nginx -c "$dir/nginx.conf" -p "$dir" -e "$dir/nginx-error.log" >/dev/null 2>&1 &
  PIDS+=($!); GATED_MASTER=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/catalog.json" && break; sleep 0.05; done
  # Sanity: the gated nginx refuses without a token and serves with one.
  local token
  token=$(head -n 1 "$WORK/tokens-whole")
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/$WHOLE")" = 401 ] \
    || { echo "gate.sh: the gate let an anonymous request in" >&2; exit 1; }
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "http://127.0.0.1:$port/$WHOLE")" = 200 ] \
    || { echo "gate.sh: the gated nginx does not serve a purchase; $(tail -3 "$dir/nginx-error.log")" >&2; exit 1; }
  GATED_PORT=$port
}
user=""; [ "$(id -u)" -eq 0 ] && user="user root;"
gated_nginx uncached 0; UNCACHED_PORT=$GATED_PORT; UNCACHED_MASTER=$GATED_MASTER
gated_nginx cached "$DECISION_CACHE"; CACHED_PORT=$GATED_PORT; CACHED_MASTER=$GATED_MASTER

# wrk scripts: every request carries one of the tokens (round robin); ranges start at a random MiB.
write_script() {  # write_script NAME PATH TOKENS RANGED
  cat > "$WORK/$1.lua" <<LUA
local tokens = {}
for line in io.lines("$3") do tokens[#tokens + 1] = line end
local next_token = math.random(#tokens)
local ranged = $4
local mib = $BIG_MIB
request = function()
  next_token = next_token % #tokens + 1
  local headers = { ["Authorization"] = "Bearer " .. tokens[next_token] }
  if ranged then
    local first = math.random(0, mib - 1) * 1048576
    headers["Range"] = "bytes=" .. first .. "-" .. (first + 1048575)
  end
  return wrk.format("GET", "/$2", headers)
end
LUA
}
write_script whole "$WHOLE" "$WORK/tokens-whole" false
write_script ranges "$BIG" "$WORK/tokens-big" true

run_wrk() {  # run_wrk PORT SCRIPT OUT
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$WORK/$2.lua" "http://127.0.0.1:$1/" > "$3"
}
cpu_ticks() {  # cpu_ticks PID...: user + system clock ticks of those processes so far
  local total=0 pid
  for pid in "$@"; do
    [ -r "/proc/$pid/stat" ] || continue
    total=$((total + $(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f12-13 | tr ' ' '+')))
  done
  echo "$total"
}
nginx_workers() {  # nginx_workers MASTER: its worker processes
  local kid
  for kid in $(cat "/proc/$1/task/$1/children"); do
    if grep -q "worker process" "/proc/$kid/cmdline" 2>/dev/null; then echo "$kid"; fi
  done
}
measured_wrk() {  # measured_wrk PORT SCRIPT OUT MASTER: run_wrk, and OUT.cpu: "nginx-ticks gate-ticks"
  local workers before_n before_g
  workers=$(nginx_workers "$4")
  before_n=$(cpu_ticks $workers); before_g=$(cpu_ticks "${GATE_PIDS[@]}")
  run_wrk "$1" "$2" "$3"
  echo "$(($(cpu_ticks $workers) - before_n)) $(($(cpu_ticks "${GATE_PIDS[@]}") - before_g))" > "$3.cpu"
}
snapshot() {  # snapshot NAME: every gate's metrics now
  for i in "${!METRICS_PORTS[@]}"; do
    curl -s "http://127.0.0.1:${METRICS_PORTS[$i]}/metrics" > "$WORK/metrics-$1-$i.txt"
  done
}
: > "$WORK/load.txt"
for case in whole ranges; do
  echo "== $case: nginx alone" >&2
  measured_wrk "$PLAIN_PORT" "$case" "$WORK/$case-plain.txt" "$PLAIN_MASTER"
  for run in uncached cached; do
    port=$UNCACHED_PORT; master=$UNCACHED_MASTER
    [ "$run" = cached ] && port=$CACHED_PORT && master=$CACHED_MASTER
    echo "== $case: nginx + auth_request + $GATES gate(s), $run" >&2
    snapshot "$case-$run-before"
    measured_wrk "$port" "$case" "$WORK/$case-$run.txt" "$master"
    snapshot "$case-$run-after"
  done
  echo "$case $(cut -d' ' -f1-3 /proc/loadavg)" >> "$WORK/load.txt"
done

python3 - "$WORK" "$WHOLE_KIB" "$GATES" "$DECISION_CACHE" "$(getconf CLK_TCK)" <<'PY'
import glob, re, sys
work, whole_kib, gates, window, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])

def cpu(path):
    """CPU microseconds per request of nginx's worker and of the gates during one wrk run."""
    requests = int(re.search(r"(\d+) requests in", open(path).read()).group(1))
    nginx, gate = (int(x) for x in open(path + ".cpu").read().split())
    return nginx / hz / requests * 1e6, gate / hz / requests * 1e6

def wrk(path):
    text = open(path).read()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", text)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors:(.*)", text)
    return rps, float(p99.group(1)) * scale[p99.group(2)], int(non2xx.group(1)) if non2xx else 0, errors.group(1).strip() if errors else ""

def metrics(name):
    """The gates' decision histogram (bucket -> count), count, sum and token-cache hits/misses, summed."""
    buckets, values = {}, {"count": 0, "sum": 0.0, "hits": 0, "misses": 0}
    for path in glob.glob(f"{work}/metrics-{name}-*.txt"):
        for line in open(path):
            m = re.match(r'courier_gate_decision_seconds_bucket\{le="([^"]+)"\} (\d+)', line)
            if m:
                le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
                buckets[le] = buckets.get(le, 0) + int(m.group(2))
            for key, pattern in (("count", r"courier_gate_decision_seconds_count (\S+)"), ("sum", r"courier_gate_decision_seconds_sum (\S+)"),
                                 ("hits", r"courier_token_cache_hits_total (\S+)"), ("misses", r"courier_token_cache_misses_total (\S+)")):
                m = re.match(pattern, line)
                if m: values[key] += float(m.group(1))
    return buckets, values

def decisions(case, run):
    """What the gates decided during one wrk run: count, mean, p50 and p99 (bucket upper bounds)."""
    (b0, v0), (b1, v1) = metrics(f"{case}-{run}-before"), metrics(f"{case}-{run}-after")
    count = int(v1["count"] - v0["count"])
    if count <= 0:
        return "no gate decisions"
    buckets = {le: b1.get(le, 0) - b0.get(le, 0) for le in b1}
    p50 = next(le for le in sorted(buckets) if buckets[le] >= 0.5 * count)
    p99 = next(le for le in sorted(buckets) if buckets[le] >= 0.99 * count)
    mean = (v1["sum"] - v0["sum"]) / count
    return (f"{count} gate decisions, mean {mean * 1e6:.0f} us, p50 <= {p50 * 1e6:.0f} us, p99 <= {p99 * 1e6:.0f} us; "
            f"token cache {int(v1['hits'] - v0['hits'])} hits, {int(v1['misses'] - v0['misses'])} misses")

loads = dict(line.split(" ", 1) for line in open(f"{work}/load.txt").read().splitlines())
for case, label in (("whole", f"whole {whole_kib} KiB file"), ("ranges", "1 MiB ranges")):
    plain = wrk(f"{work}/{case}-plain.txt")
    plain_cpu = cpu(f"{work}/{case}-plain.txt")[0]
    print(f"{label}: nginx alone {plain[0]:.0f} req/s (p99 {plain[1]:.2f} ms), nginx CPU {plain_cpu:.1f} us/request; "
          f"load average after the case {loads.get(case, '?')}")
    results = [("alone", plain)]
    for run, name in (("uncached", "no decision cache"), ("cached", f"decision cache {window} s")):
        gated = wrk(f"{work}/{case}-{run}.txt")
        results.append((run, gated))
        nginx_cpu, gate_cpu = cpu(f"{work}/{case}-{run}.txt")
        print(f"  nginx + auth_request + {gates} gates, {name}: {gated[0]:.0f} req/s (p99 {gated[1]:.2f} ms), "
              f"ratio {gated[0] / plain[0]:.2f} (goal >= 0.8); {decisions(case, run)}")
        print(f"    CPU per request: nginx {nginx_cpu:.1f} us + gates {gate_cpu:.1f} us; "
              f"alone/gated {plain_cpu / (nginx_cpu + gate_cpu):.2f}")
    for name, result in results:
        if result[2] or result[3]:
            print(f"  warning: {name}: {result[2]} non-2xx responses; socket errors: {result[3] or 'none'}")
PY
