# Sourced by the end-to-end bench scripts: nginx from the Debian packages as
# (1) the instant upstream, a canned chat completion, and (2) a plain
# reverse proxy (`proxy_pass` with keep-alive to that upstream), the
# baseline loopguard's added latency is compared with.
#
#   . benches/nginx.sh; nginx_setup
#
# Needs WORK (from bench_setup). Sets CANNED (the upstream's URL) and NGINX_PROXY
# (the proxy's URL). `nginx_setup HOST:PORT` sends the proxy there instead of
# to the canned answer. Installs nginx-light with apt-get when it is missing and
# the script runs as root; otherwise asks for it.
nginx_bin() {
  command -v nginx 2>/dev/null || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; }
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
nginx_setup() {
  local upstream="${1:-}"
  NGINX="$(nginx_bin || true)"
  if [ -z "$NGINX" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing nginx-light (apt-get)" >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null
      NGINX="$(nginx_bin)"
    else
      echo "nginx not found: apt-get install nginx-light" >&2; exit 1
    fi
  fi
  local up px
  up="$(free_port)"; px="$(free_port)"
  # The canned answer: a complete chat completion without tool calls, what
  # an instant model would return. `return` discards the request body.
  local answer='{"id":"chatcmpl-canned","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
  local stream='data: {"id":"chatcmpl-canned","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"done"},"finish_reason":null}]}\n\ndata: {"id":"chatcmpl-canned","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
  mkdir -p "$WORK/nginx"
  cat >"$WORK/nginx/upstream.conf" <<NGX
worker_processes 1;
daemon off;
pid $WORK/nginx/upstream.pid;
error_log $WORK/nginx/upstream.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_max_body_size 64m;
  client_body_buffer_size 4m;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$up backlog=4096;
    location /stream/ { default_type text/event-stream; return 200 '$stream'; }
    location / { default_type application/json; return 200 '$answer'; }
  }
}
NGX
  # The baseline proxy: as many workers as cores (loopguard's tokio runtime
  # has one worker thread per core), request bodies buffered (nginx's
  # default), keep-alive to the upstream.
  cat >"$WORK/nginx/proxy.conf" <<NGX
worker_processes auto;
daemon off;
pid $WORK/nginx/proxy.pid;
error_log $WORK/nginx/proxy.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_max_body_size 64m;
  client_body_buffer_size 4m;
  keepalive_requests 1000000;
  upstream canned { server ${upstream:-127.0.0.1:$up}; keepalive 256; }
  server {
    listen 127.0.0.1:$px backlog=4096;
    location / {
      proxy_pass http://canned;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
NGX
  "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/upstream.conf" &
  "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/proxy.conf" &
  CANNED="http://127.0.0.1:$up"
  NGINX_PROXY="http://127.0.0.1:$px"
  for _ in $(seq 1 50); do
    curl -sf -o /dev/null "$CANNED/" && curl -sf -o /dev/null "$NGINX_PROXY/" && return 0
    sleep 0.1
  done
  echo "nginx did not start: $(cat "$WORK"/nginx/*.err)" >&2; exit 1
}
