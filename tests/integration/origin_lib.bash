# An HTTPS origin for the origin tests (tests/integration/origin_*.sh; sourced, not a test
# itself): nginx from Debian on 127.0.0.1, its certificate from a test CA made here, serving
# $work/origin/ under /models/ with Range requests, and answering 401 to a request without the
# bearer token in $work/origin.token. Its access log records each answer's body bytes, so a test
# can say how many bytes the origin served.
#
#   start_origin            # https://127.0.0.1:PORT/models/ in $origin_url, CA in $work/ca.pem
#   origin_bytes            # body bytes served so far

start_origin() {
  command -v nginx >/dev/null || fail "nginx is not installed (scripts/install-deps.sh installs it)"
  local d="$work/nginx"
  mkdir -p "$d/tmp" "$work/origin"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$d/ca.key" -out "$work/ca.pem" -subj /CN=weightcast-test-ca 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=127.0.0.1 \
    -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
  echo "subjectAltName=IP:127.0.0.1" >"$d/san"
  openssl x509 -req -in "$d/server.csr" -CA "$work/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -out "$d/server.pem" -extfile "$d/san" 2>/dev/null
  (umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$work/origin.token")
  local port user_line=""
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  # Run as root, nginx's workers drop to nobody, who cannot read the test's private work dir.
  [[ "$(id -u)" == 0 ]] && user_line="user root;"
  cat >"$d/nginx.conf" <<CONF
# One process: the test's EXIT trap kills it by pid (a master killed that way would leave its
# workers serving).
master_process off;
$user_line
pid $d/nginx.pid;
daemon off;
events { worker_connections 1024; }
http {
  log_format bytes '\$request_uri \$status \$body_bytes_sent "\$http_range"';
  access_log $d/access.log bytes;
  client_body_temp_path $d/tmp/body;
  proxy_temp_path $d/tmp/proxy;
  fastcgi_temp_path $d/tmp/fastcgi;
  uwsgi_temp_path $d/tmp/uwsgi;
  scgi_temp_path $d/tmp/scgi;
  server {
    listen 127.0.0.1:$port ssl;
    ssl_certificate $d/server.pem;
    ssl_certificate_key $d/server.key;
    location /models/ {
      if (\$http_authorization != "Bearer $(cat "$work/origin.token")") { return 401; }
      alias $work/origin/;
    }
  }
}
CONF
  nginx -p "$d" -c "$d/nginx.conf" -e "$d/error.log" >>"$work/nginx.log" 2>&1 &
  pids[nginx]=$!
  origin_url="https://127.0.0.1:$port/models/"
  wait_for 10 curl -sf --cacert "$work/ca.pem" -o /dev/null \
    -H "Authorization: Bearer $(cat "$work/origin.token")" "$origin_url" -r 0-0 ||
    wait_for 10 bash -c "curl -s --cacert '$work/ca.pem' -o /dev/null -w '%{http_code}' '$origin_url' | grep -q 401" ||
    fail "nginx did not start: $(cat "$d/error.log" 2>/dev/null)"
}

origin_bytes() {
  awk '{ s += $3 } END { printf "%.0f\n", s }' "$work/nginx/access.log"
}
