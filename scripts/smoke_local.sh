#!/usr/bin/env bash
# `make smoke` / `make smoke-nginx`: start a throwaway plantstore and smoke it.
#
#   scripts/smoke_local.sh           `plantstore web` (gunicorn) on a free loopback port
#   scripts/smoke_local.sh --nginx   the same behind a real nginx using
#                                    config/nginx/plantstore.conf
#
# A temporary directory holds the SQLite database, a webhook receiver's
# recordings and every log; all processes are stopped and the directory
# removed on exit, whatever happened. Runs scripts/smoke.sh with curl, then
# checks the receiver got the "New Plant" webhooks of the plants it created.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-.venv/bin}
PYTHON=$BIN/python
NGINX=0
[ "${1:-}" = "--nginx" ] && NGINX=1

WORK=$(mktemp -d "${TMPDIR:-/tmp}/plantstore-smoke.XXXXXX")
PIDS=()
cleanup() {
    local status=$?
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ $status -ne 0 ]; then
        for log in "$WORK"/*.log "$WORK"/nginx/*.log; do
            [ -f "$log" ] && { echo "--- $log (last 40 lines)" >&2; tail -n 40 "$log" >&2; }
        done
    fi
    rm -rf "$WORK"
    exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() {  # URL PID NAME: poll URL until it answers, fail if PID dies
    local tries=0
    until curl -s -o /dev/null --max-time 1 "$1"; do
        kill -0 "$2" 2>/dev/null || { echo "$3 exited before answering" >&2; exit 1; }
        tries=$((tries + 1))
        [ $tries -lt 150 ] || { echo "$3 did not answer at $1 within 30 s" >&2; exit 1; }
        sleep 0.2
    done
}

export PLANTSTORE_DATABASE_URL="sqlite:///$WORK/plantstore.db"
export PROMETHEUS_MULTIPROC_DIR="$WORK/metrics"
unset PLANTSTORE_TEST_DATABASE_URL

echo "== throwaway database, user and token"
"$BIN/plantstore" db upgrade
"$BIN/plantstore" users create smoke
TOKEN=$("$BIN/plantstore" tokens create smoke)

echo "== webhook receiver"
"$PYTHON" scripts/webhook_receiver.py "$WORK/received.jsonl" "$WORK/receiver.port" \
    > "$WORK/receiver.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -f "$WORK/receiver.port" ] && break; sleep 0.1; done
RECEIVER_URL="http://127.0.0.1:$(cat "$WORK/receiver.port")/hooks/plants"
WEBHOOK_BEARER=smoke-receiver-token
SUBSCRIPTION=$("$BIN/plantstore" webhooks add "$RECEIVER_URL" --bearer "$WEBHOOK_BEARER")
echo "subscribed: $SUBSCRIPTION"

echo "== gunicorn"
PORT=$(free_port)
TRUSTED=0
[ $NGINX = 1 ] && TRUSTED=1
PORT=$PORT HOST=127.0.0.1 WEB_CONCURRENCY=2 PLANTSTORE_TRUSTED_PROXIES=$TRUSTED \
    "$BIN/plantstore" web \
    > "$WORK/gunicorn-access.log" 2> "$WORK/gunicorn.log" &
GUNICORN_PID=$!
PIDS+=($GUNICORN_PID)
wait_for "http://127.0.0.1:$PORT/healthz" "$GUNICORN_PID" gunicorn
BASE="http://127.0.0.1:$PORT"

if [ $NGINX = 1 ]; then
    echo "== nginx"
    NGINX_BIN=$(command -v nginx || echo /usr/sbin/nginx)
    [ -x "$NGINX_BIN" ] || { echo "nginx is not installed (apt-get install nginx)" >&2; exit 1; }
    NGINX_PORT=$(free_port)
    mkdir -p "$WORK/nginx"
    # The project's site, pointed at this gunicorn and this port, logging here.
    sed -e "s|server 127.0.0.1:8000|server 127.0.0.1:$PORT|" \
        -e "s|listen 80;|listen 127.0.0.1:$NGINX_PORT;|" \
        -e "s|/var/log/nginx/plantstore.access.log|$WORK/nginx/access.log|" \
        config/nginx/plantstore.conf > "$WORK/nginx/plantstore.conf"
    cat > "$WORK/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 256; }
http {
    default_type application/octet-stream;
    client_body_temp_path $WORK/nginx/client_body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    include $WORK/nginx/plantstore.conf;
}
EOF
    "$NGINX_BIN" -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" -t -q
    "$NGINX_BIN" -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" -g "daemon off;" \
        > "$WORK/nginx/stdout.log" 2>&1 &
    PIDS+=($!)
    wait_for "http://127.0.0.1:$NGINX_PORT/healthz" "${PIDS[-1]}" nginx
    BASE="http://127.0.0.1:$NGINX_PORT"
fi

echo "== smoke test against $BASE"
ID_BASE=$(( (RANDOM << 15 | RANDOM) + 1000 ))
SMOKE_ID_BASE=$ID_BASE PYTHON=$PYTHON scripts/smoke.sh "$BASE" "$TOKEN"

echo "== the receiver got a signed, bearer-authenticated New Plant webhook per plant"
for _ in $(seq 100); do
    [ "$(wc -l < "$WORK/received.jsonl" 2>/dev/null || echo 0)" -ge 3 ] && break
    sleep 0.2
done
"$PYTHON" - "$WORK/received.jsonl" "$ID_BASE" "$WEBHOOK_BEARER" <<'EOF'
import json, sys
path, first, bearer = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    received = [json.loads(line) for line in open(path)]
except FileNotFoundError:
    sys.exit("FAIL: the receiver got no webhook")
bodies = {}
for entry in received:
    headers = {k.lower(): v for k, v in entry["headers"].items()}
    assert headers.get("authorization") == f"Bearer {bearer}", headers
    assert headers.get("webhook-signature", "").startswith("v1,"), headers
    assert headers.get("webhook-id") and headers.get("webhook-timestamp"), headers
    body = json.loads(entry["body"])
    bodies[body["id"]] = body
expected = {first: {"id": first, "name": "smoke fern", "tag": "smoke"},
            first + 1: {"id": first + 1, "name": "smoke moss"},
            first + 2: {"id": first + 2, "name": "smoke ivy", "tag": "smoke"}}
if bodies != expected:
    sys.exit(f"FAIL: webhooks received {bodies}, expected {expected}")
print(f"ok    {len(received)} webhook(s) received for plants {sorted(bodies)}")
EOF

echo "== /metrics counted the session"
curl -sS --max-time 10 "$BASE/metrics" > "$WORK/metrics.txt"
grep -q '^plantstore_http_requests_total{method="POST",route="/plants",status="200"} 3.0$' "$WORK/metrics.txt" \
    || { echo "FAIL: /metrics does not show the 3 creates" >&2; grep plantstore_http_requests_total "$WORK/metrics.txt" >&2; exit 1; }
echo "ok    3 creates counted across workers"

if [ $NGINX = 1 ]; then
    echo "== through nginx, a client's spoofed X-Forwarded-For/Proto are not believed"
    curl -sS -o /dev/null --max-time 10 -H "X-Request-ID: spoof-check" \
        -H "X-Forwarded-For: 203.0.113.9" -H "X-Forwarded-Proto: https" "$BASE/healthz"
    grep '"request_id": "spoof-check"' "$WORK/gunicorn-access.log" \
        | grep '"remote_addr": "127.0.0.1"' | grep -q '"scheme": "http"' \
        || { echo "FAIL: spoofed forwarded headers reached the access log" >&2;
             grep spoof-check "$WORK/gunicorn-access.log" >&2; exit 1; }
    echo "ok    access log shows the address and scheme nginx saw"
    # A portal link's key never reaches a log line, nginx's nor gunicorn's
    # (the portal is off here: the path alone is what is logged).
    LINK_KEY="plk_smokeKey$RANDOM$RANDOM"
    curl -sS -o /dev/null --max-time 10 "$BASE/portal/enter/$LINK_KEY"
    for _ in $(seq 50); do grep -q 'portal/enter' "$WORK/nginx/access.log" && break; sleep 0.1; done
    grep -q '/portal/enter/\[key hidden\]' "$WORK/nginx/access.log" \
        || { echo "FAIL: nginx did not log the portal link's path" >&2; exit 1; }
    if grep -q "$LINK_KEY" "$WORK/nginx/access.log" "$WORK/gunicorn-access.log" "$WORK/gunicorn.log"; then
        echo "FAIL: a portal link's key reached a log line" >&2
        grep -h "$LINK_KEY" "$WORK/nginx/access.log" "$WORK/gunicorn-access.log" "$WORK/gunicorn.log" >&2
        exit 1
    fi
    echo "ok    a portal link's key is in no log line, nginx's or gunicorn's"
    STATUS=$(head -c 1100000 /dev/zero | tr '\0' 'a' | curl -sS -o "$WORK/big.json" -w '%{http_code}' \
        -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" \
        --data-binary @- "$BASE/plants")
    [ "$STATUS" = 413 ] && grep -q '"error": 413' "$WORK/big.json" \
        || { echo "FAIL: oversized body: HTTP $STATUS $(cat "$WORK/big.json")" >&2; exit 1; }
    echo "ok    1.1 MB body refused with a JSON 413"

    echo "== nginx answers the requests it refuses itself in the JSON error shape"
    raw() { "$PYTHON" scripts/raw_request.py "$NGINX_PORT" "$1"; }  # STATUS, request on stdin
    LONG=$(head -c 9216 /dev/zero | tr '\0' 'a')
    printf 'GET /plants?q=%s HTTP/1.1\r\nHost: x\r\n\r\n' "$LONG" | raw 414
    printf 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n' "$LONG" | raw 400
    printf 'POST /plants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n' | raw 501
    printf 'POST /plants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n' | raw 400
    printf 'POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab' | raw 400
    printf 'NOT HTTP AT ALL\r\n\r\n' | raw 400
    printf 'TRACE /plants HTTP/1.1\r\nHost: x\r\n\r\n' | raw 405
    printf 'GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n' | raw 505
    printf 'POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n' | raw 413
    printf 'GET /_errors/400 HTTP/1.1\r\nHost: x\r\n\r\n' | raw 404

    echo "== with gunicorn stopped, nginx answers a JSON 502"
    kill -TERM "$GUNICORN_PID" && wait "$GUNICORN_PID" || true
    STATUS=$(curl -sS -o "$WORK/down.json" -w '%{http_code}' --max-time 10 "$BASE/plants")
    [ "$STATUS" = 502 ] && grep -q '"error": 502' "$WORK/down.json" \
        || { echo "FAIL: gunicorn down: HTTP $STATUS $(cat "$WORK/down.json")" >&2; exit 1; }
    echo "ok    502 $(cat "$WORK/down.json")"
fi

echo "smoke: PASSED$([ $NGINX = 1 ] && echo ' (through nginx)')"
