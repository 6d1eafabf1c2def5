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
