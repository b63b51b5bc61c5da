"""Send one raw HTTP request (read from stdin) to 127.0.0.1:PORT; check the answer.

    printf 'GET / HTTP/1.1\\r\\n...' | python scripts/raw_request.py PORT STATUS

Passes (exit 0, one "ok" line) when the answer has status STATUS and is
the service's JSON error shape: Content-Type application/json and a body
{"error": STATUS, "message": "..."}. For requests curl will not send
(malformed framing, oversized headers). Bounded by a 10 s deadline.
"""
import json
import socket
import sys
import time


def exchange(port, request, seconds=10.0):
    """The raw answer to ``request``; the client half-closes after sending."""
    deadline = time.monotonic() + seconds
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may answer and close before reading everything
        answer = b""
        while time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            answer += data
    return answer


def check(answer, status):
    """An error message, or None when ``answer`` is a JSON error with ``status``."""
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/") or lines[0].split()[1] != str(status):
        return f"status line {lines[0]!r}"
    headers = {name.lower(): value.strip() for name, _, value in
               (line.partition(":") for line in lines[1:])}
    if headers.get("content-type", "").split(";")[0] != "application/json":
        return f"Content-Type {headers.get('content-type')!r}"
    try:
        payload = json.loads(body)
    except ValueError:
        return f"body is not JSON: {body[:200]!r}"
    if payload.get("error") != status or not payload.get("message"):
        return f"body {payload!r}"
    return None


def main():
    port, status = int(sys.argv[1]), int(sys.argv[2])
    request = sys.stdin.buffer.read()
    answer = exchange(port, request)
    problem = check(answer, status)
    first_line = request.split(b"\r\n", 1)[0][:60].decode("latin-1")
    if problem:
        sys.exit(f"FAIL: {first_line!r}... expected a JSON {status}: {problem}")
    body = answer.partition(b"\r\n\r\n")[2].decode()
    print(f"ok    {status} {body}  ({first_line}...)")


if __name__ == "__main__":
    main()
