#!/usr/bin/env bash
# nginx + auth_request + `courier serve` gates vs nginx alone, serving the same files to wrk with
# 64 connections, in the same run (release build): whole files and 1 MiB ranges of a bigger one.
# nginx is configured with what `courier origin nginx-config` prints, twice: with its decision
# cache (`--decision-cache`, DECISION_CACHE seconds, default 2) and without (`--decision-cache 0`);
# every request carries a signed transaction (64 distinct purchases, so the gates' token cache
# holds 64 entries and nginx's decision cache 64 keys per file).
#
# The measurement is made to be trusted on a small machine that other work keeps busy:
# - the server side (each nginx's worker and master, the gates) is pinned to one CPU (SERVER_CPU,
#   default 0) and wrk to another (CLIENT_CPU, default 1) with taskset, so the setups compare the
#   requests one core serves, and wrk never takes the server's core (PIN=0 turns this off; it is
#   off on a machine with one CPU);
# - both run at niceness NICE (default -15, as root; with the scheduler's autogroups, the whole
#   benchmark runs in a session of its own with that niceness), so that other work on the
#   machine takes little of those CPUs whichever setup runs (how much it took is printed per run);
#   Ctrl-C then stops only the waiting parent: stop a run with `kill -- -PID`, PID being its
#   `bash …/gate.sh` (its session's leader), which ends its nginx, gates and wrk and cleans up;
# - the setups are interleaved: ROUNDS rounds (default 7) of DURATION seconds (default 10) per
#   setup and case, each round alone/cached/uncached, the next one in the opposite order (ABBA),
#   so a change in the machine's other load falls on both sides;
# - the ratio is taken per round (gated against the alone run next to it), and its median and
#   spread (min, max) printed with every round's value; also the ratio of the median req/s;
# - per run, the CPU time nginx's worker and the gates spent per request (/proc: what bounds the
#   requests one core serves, steadier than req/s) and the share of the server CPU that other
#   processes took (/proc/stat), so a disturbed round can be seen; the ratio is also given with
#   each run's req/s divided by the share of the server CPU the others left it.
# Prints also wrk's p99 latency and the gates' p99 decision time from their
# courier_gate_decision_seconds histograms (what the gates were asked during all gated runs of a
# case), and the load average.
# Before/after a change of the printed configuration, in the same run: CONFIG_BIN prints the
# configurations (default: the gates' binary), and the setup "baseline" (add it to SETUPS) is the
# cached setup with the configuration BASELINE_BIN prints (an older courier), e.g.
#   SETUPS="alone cached baseline" BASELINE_BIN=/tmp/courier-before Benchmarks/gate.sh
#   Benchmarks/gate.sh
#   COURIER_BIN=.build/debug/courier DURATION=3 ROUNDS=2 BIG_MIB=16 Benchmarks/gate.sh   # a quick check
set -euo pipefail
SELF=$(realpath "$0")
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
ROUNDS=${ROUNDS:-7}            # interleaved rounds per case
SETUPS=${SETUPS:-"alone cached uncached"}  # the order of the first round (the next is reversed)
CONFIG_BIN=${CONFIG_BIN:-}     # the courier that prints the configurations (default: the gates')
BASELINE_BIN=${BASELINE_BIN:-} # the courier that prints the "baseline" setup's configuration
SERVER_CPU=${SERVER_CPU:-0}    # nginx and the gates
CLIENT_CPU=${CLIENT_CPU:-1}    # wrk
PIN=${PIN:-1}
[ "$(nproc)" -ge 2 ] || PIN=0
# The niceness of the server side and of wrk (root only; others' work keeps 0): the benchmark's
# processes get their CPUs first, so other work does not decide which setup gets more of them.
NICE=${NICE:--15}
[ "$(id -u)" -eq 0 ] || NICE=0
# With the scheduler's autogroups (kernel.sched_autogroup_enabled), niceness ranks processes only
# within one session, and each session gets an equal share: the benchmark runs in a session of
# its own (setsid) whose group gets the niceness NICE.
if [ "$NICE" != 0 ] && [ "$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null)" = 1 ]; then
  if [ -z "${GATE_SH_SESSION:-}" ]; then
    exec setsid -w env GATE_SH_SESSION=1 "$SELF" "$@"
  fi
  echo "$NICE" > /proc/self/autogroup
fi

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
PRINTER=$BIN; [ -n "$CONFIG_BIN" ] && PRINTER=$(realpath "$CONFIG_BIN")
case " $SETUPS " in
  *" baseline "*) [ -n "$BASELINE_BIN" ] || { echo "gate.sh: the baseline setup needs BASELINE_BIN" >&2; exit 2; }
    BASELINE_BIN=$(realpath "$BASELINE_BIN") ;;
esac
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

# server_cpu CMD... &: runs CMD on the server's CPU (when pinning), in place of the background
# subshell (exec), so that $! is CMD's process. pin PID...: moves every thread of running
# processes there (nginx's master and workers, started by common.sh).
server_cpu() { if [ "$PIN" = 1 ]; then exec nice -n "$NICE" taskset -c "$SERVER_CPU" "$@"; else exec nice -n "$NICE" "$@"; fi; }
pin() {
  local pid
  for pid in "$@"; do
    renice -n "$NICE" -p "$pid" >/dev/null
    if [ "$PIN" = 1 ]; then taskset -a -p -c "$SERVER_CPU" "$pid" >/dev/null; fi
  done
}

# The gates.
GATE_ARGS=(); GATE_PIDS=()
for i in $(seq "$GATES"); do
  server_cpu "$BIN" serve --content "$WORK/content" --port 0 --json --metrics-port 0 --storage "$WORK/storage" \
    --trust-root "$WORK/sandbox" --bundle-id com.example.app --environment Sandbox > "$WORK/gate$i.log" 2>"$WORK/gate$i.err" &
  PIDS+=($!); GATE_PIDS+=($!)
done
# Both gates start at once on one --storage (one origin.sqlite): Courier creates its schema once
# and the other waits for it (issue 33), so neither dies of "table notifications already exists".
port_of() {  # port_of LOG EVENT PID (a busy machine may take a while to start a gate; a dead one is said at once)
  for _ in $(seq 1200); do
    grep -q "\"$2\"" "$1" 2>/dev/null && break
    kill -0 "$3" 2>/dev/null || break
    sleep 0.05
  done
  grep -q "\"$2\"" "$1" 2>/dev/null \
    || { echo "gate.sh: no $2 event in $1 ($(kill -0 "$3" 2>/dev/null && echo "not within 60 s" || echo "the gate exited")); $(tail -3 "${1%.log}.err" 2>/dev/null)" >&2; exit 1; }
  python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and json.loads(l).get("event")==sys.argv[2]][0]["port"])' "$1" "$2"
}
METRICS_PORTS=()
for i in $(seq "$GATES"); do
  GATE_ARGS+=(--gate "127.0.0.1:$(port_of "$WORK/gate$i.log" listening "${GATE_PIDS[$((i - 1))]}")")
  METRICS_PORTS+=("$(port_of "$WORK/gate$i.log" metrics "${GATE_PIDS[$((i - 1))]}")")
done

# nginx alone (Benchmarks/common.sh) and nginx with the printed configuration, same main context.
mkdir -p "$WORK/plain"
start_nginx "$WORK/content" "$WORK/plain"
PLAIN_PORT=$NGINX_PORT; PLAIN_MASTER=$NGINX_PID; PIDS+=("$NGINX_PID"); NGINX_PID=""

# gated_nginx NAME CACHE_SECONDS [COURIER]: starts nginx with the configuration COURIER (default
# PRINTER) prints; sets GATED_PORT.
gated_nginx() {
  local dir="$WORK/$1" port
  mkdir -p "$dir"
  port=$(free_port)
  "${3:-$PRINTER}" origin nginx-config --content "$WORK/content" "${GATE_ARGS[@]}" --listen "127.0.0.1:$port" \
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
  server_cpu /usr/sbin/nginx -c "$dir/nginx.conf" -p "$dir" -e "$dir/nginx-error.log" >/dev/null 2>&1 &
  PIDS+=($!); GATED_MASTER=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/catalog.json" && break; sleep 0.05; done
  # Sanity: the gated nginx refuses without a token, and a copy of one with another JWS header
  # (asked first, before its payload and signature have an allow cached), and serves with one.
  local token altered
  token=$(head -n 1 "$WORK/tokens-whole")
  altered="$(printf '{"alg":"ES256"}' | base64 | tr '+/' '-_' | tr -d '=\n').${token#*.}"
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/$WHOLE")" = 401 ] \
    || { echo "gate.sh: the gate let an anonymous request in" >&2; exit 1; }
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $altered" "http://127.0.0.1:$port/$WHOLE")" = 401 ] \
    || { echo "gate.sh: the gate let a token with an altered header in" >&2; exit 1; }
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "http://127.0.0.1:$port/$WHOLE")" = 200 ] \
    || { echo "gate.sh: the gated nginx does not serve a purchase; $(tail -3 "$dir/nginx-error.log")" >&2; exit 1; }
  GATED_PORT=$port
}
user=""; [ "$(id -u)" -eq 0 ] && user="user root;"
gated_nginx uncached 0; UNCACHED_PORT=$GATED_PORT; UNCACHED_MASTER=$GATED_MASTER
gated_nginx cached "$DECISION_CACHE"; CACHED_PORT=$GATED_PORT; CACHED_MASTER=$GATED_MASTER
BASELINE_MASTER=""
if [ -n "$BASELINE_BIN" ]; then
  gated_nginx baseline "$DECISION_CACHE" "$BASELINE_BIN"; BASELINE_PORT=$GATED_PORT; BASELINE_MASTER=$GATED_MASTER
fi

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
  if [ "$PIN" = 1 ]; then
    nice -n "$NICE" taskset -c "$CLIENT_CPU" wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$WORK/$2.lua" "http://127.0.0.1:$1/" > "$3"
  else
    nice -n "$NICE" wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$WORK/$2.lua" "http://127.0.0.1:$1/" > "$3"
  fi
}
cpu_ticks() {  # cpu_ticks PID...: user + system clock ticks of those processes so far
  local total=0 pid
  for pid in "$@"; do
    [ -r "/proc/$pid/stat" ] || continue
    total=$((total + $(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f12-13 | tr ' ' '+')))
  done
  echo "$total"
}
cpu_line() {  # cpu_line N: "tasks total" clock ticks of CPU N so far (tasks: user, nice and system
  # time of processes, which /proc/PID/stat counts; interrupts and softirqs, loopback TCP's
  # included, are in neither)
  awk -v cpu="cpu$1" '$1 == cpu { total = 0; for (i = 2; i <= 9; i++) total += $i; print $2 + $3 + $4, total }' /proc/stat
}
nginx_workers() {  # nginx_workers MASTER: its worker processes
  local kid
  for kid in $(cat "/proc/$1/task/$1/children"); do
    if grep -q "worker process" "/proc/$kid/cmdline" 2>/dev/null; then echo "$kid"; fi
  done
}
# measured_wrk PORT SCRIPT OUT MASTER: run_wrk, and OUT.cpu: "nginx-ticks gate-ticks
# server-cpu-tasks server-cpu-total client-cpu-tasks client-cpu-total" over the run.
measured_wrk() {
  local workers before_n before_g before_s before_c
  workers=$(nginx_workers "$4")
  before_n=$(cpu_ticks $workers); before_g=$(cpu_ticks "${GATE_PIDS[@]}")
  before_s=$(cpu_line "$SERVER_CPU"); before_c=$(cpu_line "$CLIENT_CPU")
  run_wrk "$1" "$2" "$3"
  local after_s after_c
  after_s=$(cpu_line "$SERVER_CPU"); after_c=$(cpu_line "$CLIENT_CPU")
  echo "$(($(cpu_ticks $workers) - before_n)) $(($(cpu_ticks "${GATE_PIDS[@]}") - before_g))" \
    "$((${after_s% *} - ${before_s% *})) $((${after_s#* } - ${before_s#* }))" \
    "$((${after_c% *} - ${before_c% *})) $((${after_c#* } - ${before_c#* }))" > "$3.cpu"
}
snapshot() {  # snapshot NAME: every gate's metrics now
  for i in "${!METRICS_PORTS[@]}"; do
    curl -s "http://127.0.0.1:${METRICS_PORTS[$i]}/metrics" > "$WORK/metrics-$1-$i.txt"
  done
}

# Every nginx process on the server's CPU at the benchmark's niceness (the gated ones and the
# gates were started so).
for master in "$PLAIN_MASTER" "$UNCACHED_MASTER" "$CACHED_MASTER" $BASELINE_MASTER; do
  pin "$master" $(nginx_workers "$master")
done

: > "$WORK/load.txt"
read -r -a order <<< "$SETUPS"
for round in $(seq "$ROUNDS"); do
  for case in whole ranges; do
    for setup in "${order[@]}"; do
      out="$WORK/$case-$setup-$round.txt"
      case $setup in
        alone) echo "== round $round, $case: nginx alone" >&2
          measured_wrk "$PLAIN_PORT" "$case" "$out" "$PLAIN_MASTER" ;;
        cached|uncached|baseline)
          port=$UNCACHED_PORT; master=$UNCACHED_MASTER
          [ "$setup" = cached ] && port=$CACHED_PORT && master=$CACHED_MASTER
          [ "$setup" = baseline ] && port=$BASELINE_PORT && master=$BASELINE_MASTER
          echo "== round $round, $case: nginx + auth_request + $GATES gate(s), $setup" >&2
          snapshot "$case-$setup-$round-before"
          measured_wrk "$port" "$case" "$out" "$master"
          snapshot "$case-$setup-$round-after" ;;
        *) echo "gate.sh: unknown setup $setup (alone, cached, uncached, baseline)" >&2; exit 2 ;;
      esac
    done
    echo "$case $round $(cut -d' ' -f1-3 /proc/loadavg)" >> "$WORK/load.txt"
  done
  order=($(printf '%s\n' "${order[@]}" | tac))
done

python3 - "$WORK" "$WHOLE_KIB" "$GATES" "$DECISION_CACHE" "$(getconf CLK_TCK)" "$ROUNDS" "$DURATION" "$PIN" "$SERVER_CPU" "$CLIENT_CPU" "$SETUPS" "$NICE" <<'PY'
import glob, re, statistics, sys
work, whole_kib, gates, window, hz, rounds, duration = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
pinned, server_cpu, client_cpu, setups, nice = sys.argv[8] == "1", sys.argv[9], sys.argv[10], sys.argv[11].split(), sys.argv[12]

def cpu(path):
    """Per run: nginx's and the gates' CPU microseconds per request, the share of the server CPU
    other processes took, and the share of the client CPU processes used (wrk and others)."""
    requests = int(re.search(r"(\d+) requests in", open(path).read()).group(1))
    nginx, gate, s_busy, s_total, c_busy, c_total = (int(x) for x in open(path + ".cpu").read().split())
    others = max(0, s_busy - nginx - gate) / s_total if s_total else 0
    return nginx / hz / requests * 1e6, gate / hz / requests * 1e6, others, (c_busy / c_total if c_total else 0)

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

def decisions(case, setup, first=1):
    """What the gates decided during a setup's runs of a case from round `first` on: count, mean,
    p50, p99 (bucket upper bounds)."""
    buckets, count, total, hits, misses = {}, 0, 0.0, 0, 0
    for r in range(first, rounds + 1):
        (b0, v0), (b1, v1) = metrics(f"{case}-{setup}-{r}-before"), metrics(f"{case}-{setup}-{r}-after")
        for le in b1: buckets[le] = buckets.get(le, 0) + b1[le] - b0.get(le, 0)
        count += int(v1["count"] - v0["count"]); total += v1["sum"] - v0["sum"]
        hits += int(v1["hits"] - v0["hits"]); misses += int(v1["misses"] - v0["misses"])
    if count <= 0:
        return "no gate decisions"
    p50 = next(le for le in sorted(buckets) if buckets[le] >= 0.5 * count)
    p99 = next(le for le in sorted(buckets) if buckets[le] >= 0.99 * count)
    return (f"{count} gate decisions in {rounds - first + 1} runs, mean {total / count * 1e6:.0f} us, p50 <= {p50 * 1e6:.0f} us, "
            f"p99 <= {p99 * 1e6:.0f} us; token cache {hits} hits, {misses} misses")

def spread(values, digits=2):
    return f"median {statistics.median(values):.{digits}f} (min {min(values):.{digits}f}, max {max(values):.{digits}f})"

loads = {}
for line in open(f"{work}/load.txt").read().splitlines():
    case, r, rest = line.split(" ", 2)
    loads.setdefault(case, []).append(rest.split()[0])
where = f"server side on CPU {server_cpu}, wrk on CPU {client_cpu}" if pinned else "not pinned"
where += f", niceness {nice}"
print(f"{rounds} interleaved rounds of {duration} s per setup ({where}); ratios per round against the alone run of the same round")
names = {"cached": f"decision cache {window} s", "uncached": "no decision cache",
         "baseline": f"decision cache {window} s, BASELINE_BIN's configuration"}
for case, label in (("whole", f"whole {whole_kib} KiB file"), ("ranges", "1 MiB ranges")):
    runs = {s: [wrk(f"{work}/{case}-{s}-{r}.txt") for r in range(1, rounds + 1)] for s in setups}
    cpus = {s: [cpu(f"{work}/{case}-{s}-{r}.txt") for r in range(1, rounds + 1)] for s in setups}
    print(f"{label} (load average after each round: {' '.join(loads.get(case, []))}):")
    if "alone" not in runs:
        print("  (no alone runs: no ratios)")
        continue
    alone_rps = [r[0] for r in runs["alone"]]
    alone_cpu = [c[0] for c in cpus["alone"]]
    print(f"  nginx alone: req/s {spread(alone_rps, 0)}; p99 {statistics.median(r[1] for r in runs['alone']):.2f} ms; "
          f"nginx CPU {statistics.median(alone_cpu):.1f} us/request; others on the server CPU "
          f"{' '.join(f'{c[2]:.0%}' for c in cpus['alone'])}; client CPU used {statistics.median(c[3] for c in cpus['alone']):.0%}")
    for setup in (s for s in setups if s != "alone"):
        rps = [r[0] for r in runs[setup]]
        ratios = [g / a for g, a in zip(rps, alone_rps)]
        per_request = [n + g for n, g, _, _ in cpus[setup]]
        cpu_ratios = [a / g for a, g in zip(alone_cpu, per_request)]
        print(f"  nginx + auth_request + {gates} gates, {names[setup]}: req/s {spread(rps, 0)}; p99 "
              f"{statistics.median(r[1] for r in runs[setup]):.2f} ms")
        print(f"    throughput ratio gated/alone per round: {spread(ratios)} (goal >= 0.8); rounds: "
              f"{' '.join(f'{x:.2f}' for x in ratios)}; ratio of the medians {statistics.median(rps) / statistics.median(alone_rps):.2f}")
        # req/s over the share of the server CPU other processes left: what the setup served per
        # second of the server CPU it could have had (a round another process disturbed counts less).
        available = [r[0] / max(0.05, 1 - c[2]) for r, c in zip(runs[setup], cpus[setup])]
        available_alone = [r[0] / max(0.05, 1 - c[2]) for r, c in zip(runs["alone"], cpus["alone"])]
        print(f"    per available server CPU (req/s / (1 - others' share)), ratio per round: "
              f"{spread([g / a for g, a in zip(available, available_alone)])}")
        print(f"    CPU per request: nginx {statistics.median(c[0] for c in cpus[setup]):.1f} us + gates "
              f"{statistics.median(c[1] for c in cpus[setup]):.1f} us (medians); alone/gated per round {spread(cpu_ratios)}")
        print(f"    others on the server CPU: {' '.join(f'{c[2]:.0%}' for c in cpus[setup])}; {decisions(case, setup)}")
        if rounds > 1:
            # The first round holds the first verification of every token (ES256 and its chain,
            # about a millisecond each): without it, what a running gate takes to decide.
            print(f"    after the first round: {decisions(case, setup, first=2)}")
    for setup in setups:
        for i, result in enumerate(runs[setup]):
            if result[2] or result[3]:
                print(f"  warning: {setup} round {i + 1}: {result[2]} non-2xx responses; socket errors: {result[3] or 'none'}")
PY
