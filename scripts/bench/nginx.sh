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
        }
    }
}
EOF
}
