#!/usr/bin/env bash
# Smoke-test a running plantstore with curl: scripts/smoke.sh BASE_URL TOKEN
#
# Creates three plants, lists them with limit=2 and follows the Link header,
# deletes them, and checks 401 without a token and the {"error", "message"}
# shape of error answers. Prints each step; exits non-zero on the first
# failure. TOKEN must carry the plants:read and plants:write scopes.
#
# Environment: SMOKE_ID_BASE (first plant id; default: random, so a shared
# deployment's plants are not touched), PYTHON (default python3, used to
# read JSON).
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 BASE_URL TOKEN" >&2
    exit 2
fi
BASE=${1%/}
TOKEN=$2
PYTHON=${PYTHON:-python3}
ID=${SMOKE_ID_BASE:-$(( (RANDOM << 30 | RANDOM << 15 | RANDOM) + 1000000 ))}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
STEP=0

fail() {
    echo "FAIL  $STEP. $*" >&2
    echo "--- response headers:" >&2; cat "$WORK/headers" >&2 2>/dev/null || true
    echo "--- response body:" >&2; cat "$WORK/body" >&2 2>/dev/null || true
    echo >&2
    exit 1
}

step() {
    STEP=$((STEP + 1))
    echo "----  $STEP. $*"
}

ok() {
    echo "ok    $STEP. $*"
}

# call METHOD PATH [curl args...]: sets STATUS; body and headers land in $WORK.
call() {
    local method=$1 path=$2
    shift 2
    STATUS=$(curl -sS --max-time 15 -X "$method" -o "$WORK/body" -D "$WORK/headers" \
                  -w '%{http_code}' "$@" "$BASE$path") || fail "curl $method $path failed"
}

expect_status() {
    [ "$STATUS" = "$1" ] || fail "expected HTTP $1, got $STATUS"
}

# The value of response header $1 (case-insensitive), without the CR.
header() {
    grep -i "^$1:" "$WORK/headers" | head -n1 | cut -d: -f2- | sed 's/^ *//' | tr -d '\r'
}

# expect_json PYTHON_EXPR: the expression, over the parsed body `b`, is true.
expect_json() {
    "$PYTHON" -c 'import json, sys
b = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)' "$WORK/body" "$1" || fail "body does not satisfy: $1"
}

expect_error_shape() {
    expect_status "$1"
    case "$(header Content-Type)" in application/json*) ;; *) fail "error is not JSON";; esac
    expect_json "b['error'] == $1 and isinstance(b['message'], str) and b['message'] and set(b) <= {'error', 'message', 'details'}"
}

AUTH=(-H "Authorization: Bearer $TOKEN")
JSON=(-H "Content-Type: application/json")

step "GET /healthz and /readyz answer without a token"
call GET /healthz; expect_status 200
call GET /readyz; expect_status 200; expect_json "b['status'] == 'ready'"
ok "service up, database reachable"

step "GET /plants without a token is 401 with a Bearer challenge"
call GET /plants
expect_error_shape 401
header WWW-Authenticate | grep -q '^Bearer realm="plantstore"' || fail "no WWW-Authenticate: Bearer challenge"
ok "401, WWW-Authenticate: $(header WWW-Authenticate)"

step "GET /plants with an unknown token is 401 invalid_token"
call GET /plants -H "Authorization: Bearer pst_not-a-real-token"
expect_error_shape 401
header WWW-Authenticate | grep -q 'error="invalid_token"' || fail "no error=\"invalid_token\""
ok "401 invalid_token"

step "POST /plants creates plants $ID, $((ID + 1)), $((ID + 2))"
call POST /plants "${AUTH[@]}" "${JSON[@]}" -H "X-Request-ID: smoke-$ID" \
    -d "{\"id\": $ID, \"name\": \"smoke fern\", \"tag\": \"smoke\"}"
expect_status 200
expect_json "b == {'name': 'smoke fern', 'tag': 'smoke'}"
[ "$(header X-Request-ID)" = "smoke-$ID" ] || fail "X-Request-ID not returned"
call POST /plants "${AUTH[@]}" "${JSON[@]}" -d "{\"id\": $((ID + 1)), \"name\": \"smoke moss\"}"
expect_status 200
expect_json "b == {'name': 'smoke moss'}"
call POST /plants "${AUTH[@]}" "${JSON[@]}" -d "{\"id\": $((ID + 2)), \"name\": \"smoke ivy\", \"tag\": \"smoke\"}"
expect_status 200
ok "3 plants created (200, no id in the body, no null tag)"

step "POST /plants with an existing id is 409"
call POST /plants "${AUTH[@]}" "${JSON[@]}" -d "{\"id\": $ID, \"name\": \"again\"}"
expect_error_shape 409
ok "409: $(cat "$WORK/body")"

step "POST /plants with an invalid body is 400 with details"
call POST /plants "${AUTH[@]}" "${JSON[@]}" -d '{"id": "one", "name": null}'
expect_error_shape 400
expect_json "'details' in b"
call POST /plants "${AUTH[@]}" "${JSON[@]}" -d '{"id": 1,'
expect_error_shape 400
ok "400 for wrong types and for malformed JSON"

step "POST /plants with a non-JSON body is 415"
call POST /plants "${AUTH[@]}" -H "Content-Type: text/plain" -d "fern"
expect_error_shape 415
ok "415"

step "GET /plants?limit=2 pages with a Link header"
call GET "/plants?limit=2&after=$((ID - 1))" "${AUTH[@]}"
expect_status 200
expect_json "b == [{'name': 'smoke fern', 'tag': 'smoke'}, {'name': 'smoke moss'}]"
LINK=$(header Link)
NEXT=$(printf '%s' "$LINK" | sed -n 's/^<\([^>]*\)>; *rel="next".*$/\1/p')
[ -n "$NEXT" ] || fail "no Link: <...>; rel=\"next\" header (got: '$LINK')"
case "$NEXT" in http://*|https://*) NEXT=/${NEXT#*://*/};; esac
call GET "$NEXT" "${AUTH[@]}"
expect_status 200
expect_json "b[0] == {'name': 'smoke ivy', 'tag': 'smoke'}"
ok "page 1 = 2 plants, Link $LINK, page 2 starts with the third"

step "GET /plants?limit=0 is 400 naming the bound"
call GET "/plants?limit=0" "${AUTH[@]}"
expect_error_shape 400
ok "400: $(cat "$WORK/body")"

step "DELETE /plants/{id} removes the plants"
for plant in "$ID" "$((ID + 1))" "$((ID + 2))"; do
    call DELETE "/plants/$plant" "${AUTH[@]}"
    expect_status 204
    [ ! -s "$WORK/body" ] || fail "204 with a body"
done
call GET "/plants?limit=3&after=$((ID - 1))" "${AUTH[@]}"
expect_status 200
expect_json "all(p['name'] not in ('smoke fern', 'smoke moss', 'smoke ivy') for p in b)"
ok "3 × 204, and they are gone from the list"

step "DELETE of a deleted plant is 404"
call DELETE "/plants/$ID" "${AUTH[@]}"
expect_error_shape 404
ok "404"

step "unknown route is a JSON 404, wrong method a JSON 405"
call GET /no-such-thing
expect_error_shape 404
call PUT /plants "${AUTH[@]}"
expect_error_shape 405
ok "404 and 405 keep the error shape"

echo "smoke: all $STEP steps passed against $BASE"
