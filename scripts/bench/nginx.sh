# The two nginx servers of the proxy benchmark, shared by scripts/bench.sh and
# scripts/bench/profile.sh so that both measure the same configuration:
# $WORK/backend.conf, (a) the backend, and $WORK/proxy.conf, (b) nginx
# proxy_pass in front of it. Extra main-context directives (profile.sh adds
# `master_process off;` for valgrind) come last. Source it, then call
#   write_nginx_confs WORK BACKEND_PORT PROXY_PORT [MAIN_DIRECTIVE...]

write_nginx_confs() { # write_nginx_confs WORK BACKEND_PORT PROXY_PORT [MAIN_DIRECTIVE...]
  local work=$1 backend_port=$2 nginx_port=$3
  shift 3
  local common="
daemon off;
worker_processes 1;
events { worker_connections 4096; }
$*"
  # BENCH_BACKEND_ETAG=1: every answer names a version (a constant strong
  # ETag), for the cost of chained writes (w1c, docs/BENCHMARKS.md).
  local etag=""
  [ -n "${BENCH_BACKEND_ETAG:-}" ] && etag="add_header ETag '\"fencegate-bench\"' always;"
  local http_common="
    access_log off;
    keepalive_timeout 75s;
    keepalive_requests 100000000;
    client_max_body_size 0;
    proxy_temp_path $work/nginx-proxy-temp;
    fastcgi_temp_path $work/nginx-fastcgi-temp;
    uwsgi_temp_path $work/nginx-uwsgi-temp;
    scgi_temp_path $work/nginx-scgi-temp;"
  cat >"$work/backend.conf" <<EOF
# (a) The backend: 204 for a PUT (body read and dropped), a 62-byte body
# for a GET; /upload/ stores what it gets (the 1 GiB upload).
$common
pid $work/backend.pid;
error_log $work/backend.error.log warn;
http {
$http_common
    client_body_temp_path $work/backend-body-temp;
    server {
        listen 127.0.0.1:$backend_port backlog=4096;
        root $work/dav;
        location /upload/ {
            dav_methods PUT;
            create_full_put_path on;
        }
        location / {
            $etag
            if (\$request_method = PUT) { return 204; }
            return 200 "a small object, 64 bytes long, for the GET pass-through test.\n";
        }
    }
}
EOF
  cat >"$work/proxy.conf" <<EOF
# (b) The plain reverse proxy a user would otherwise deploy: proxy_pass with
# keep-alive connections to the backend, defaults otherwise.
$common
pid $work/proxy.pid;
error_log $work/proxy.error.log warn;
http {
$http_common
    client_body_temp_path $work/proxy-body-temp;
    upstream backend {
        server 127.0.0.1:$backend_port;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$nginx_port backlog=4096;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # The forwarding headers fencegate adds, so that both proxies
            # write the same head.
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto \$scheme;
        }
        # Bulk transfers (part 3b) streamed both ways, as fencegate streams
        # them: neither the request nor the response is buffered.
        location /upload/ {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto \$scheme;
            proxy_request_buffering off;
            proxy_buffering off;
        }
    }
}
EOF
}

# The TLS servers of part 5 (front): $WORK/backend-tls.conf, the backend of
# backend.conf with an ssl listener; $WORK/proxy-tls-client.conf, proxy_pass
# to the plain backend behind an ssl listener; $WORK/proxy-tls-up.conf, a
# plain listener with proxy_pass https:// to the TLS backend, verified against
# the test CA, connections kept alive as in proxy.conf.
write_nginx_tls_confs() { # WORK BACKEND_PORT TLS_BACKEND_PORT TLS_CLIENT_PORT TLS_UP_PORT TLS_DIR
  local work=$1 backend_port=$2 tls_backend_port=$3 tls_client_port=$4 tls_up_port=$5 tls=$6
  local ssl=" ssl_certificate $tls/leaf.pem; ssl_certificate_key $tls/leaf.key; ssl_session_cache shared:SSL:1m;"
  sed -e "s|listen 127.0.0.1:$backend_port backlog=4096;|listen 127.0.0.1:$tls_backend_port ssl backlog=4096;$ssl|" \
    -e "s|pid $work/backend.pid;|pid $work/backend-tls.pid;|" \
    -e "s|error_log $work/backend.error.log|error_log $work/backend-tls.error.log|" \
    -e "s|backend-body-temp|backend-tls-body-temp|" \
    "$work/backend.conf" >"$work/backend-tls.conf"
  local nginx_port
  nginx_port=$(sed -n 's/.*listen 127.0.0.1:\([0-9]*\) backlog.*/\1/p' "$work/proxy.conf")
  sed -e "s|listen 127.0.0.1:$nginx_port backlog=4096;|listen 127.0.0.1:$tls_client_port ssl backlog=4096;$ssl|" \
    -e "s|pid $work/proxy.pid;|pid $work/proxy-tls-client.pid;|" \
    -e "s|error_log $work/proxy.error.log|error_log $work/proxy-tls-client.error.log|" \
    -e "s|proxy-body-temp|proxy-tls-client-body-temp|" \
    "$work/proxy.conf" >"$work/proxy-tls-client.conf"
  sed -e "s|listen 127.0.0.1:$nginx_port backlog=4096;|listen 127.0.0.1:$tls_up_port backlog=4096;|" \
    -e "s|server 127.0.0.1:$backend_port;|server 127.0.0.1:$tls_backend_port;|" \
    -e "s|proxy_pass http://backend;|proxy_pass https://backend;\n            proxy_ssl_verify on;\n            proxy_ssl_trusted_certificate $tls/ca.pem;\n            proxy_ssl_name localhost;\n            proxy_ssl_server_name on;\n            proxy_ssl_session_reuse on;|" \
    -e "s|pid $work/proxy.pid;|pid $work/proxy-tls-up.pid;|" \
    -e "s|error_log $work/proxy.error.log|error_log $work/proxy-tls-up.error.log|" \
    -e "s|proxy-body-temp|proxy-tls-up-body-temp|" \
    "$work/proxy.conf" >"$work/proxy-tls-up.conf"
}
