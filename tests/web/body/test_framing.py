"""Request bodies a client truncates or frames badly, sent over raw sockets
to a real gunicorn: each is a 400 in the contract's shape, logged as the
client's error, and creates nothing."""
import json
import socket
import time

import pytest

from plantstore.db.models import Plant


def exchange(port, request, half_close=True, seconds=10):
    """Send raw ``request`` bytes; the answer's status, headers and JSON body.

    With ``half_close`` the client then shuts its sending side, as a client
    that stopped sending mid-body would.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
            head, _, body = answer.partition(b"\r\n\r\n")
            length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")]
            if length and len(body) >= length[0]:
                break
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


def post_head(token, *framing):
    return ("POST /plants HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            + "".join(f"{line}\r\n" for line in framing) + "\r\n").encode()


def assert_refused_as_client_error(server, status, headers, body):
    assert status == 400, body
    assert headers["Content-Type"] == "application/json"
    assert set(body) == {"error", "message"} and body["error"] == 400
    output = server.output()
    assert "unhandled error" not in output and "Traceback" not in output


CHUNK = b'{"id": 1, "name": "fern"}'
MALFORMED_CHUNKED = {
    "size is not hex": b"zz\r\n" + CHUNK + b"\r\n0\r\n\r\n",
    "chunk without its CRLF": b"%x\r\n" % len(CHUNK) + CHUNK + b"XX0\r\n\r\n",
    "bad chunk extension": b"%x;=\r\n" % len(CHUNK) + CHUNK + b"\r\n0\r\n\r\n",
    "size line without CRLF": b"%x\n" % len(CHUNK) + CHUNK + b"\r\n0\r\n\r\n",
    "ends mid-chunk": b"%x\r\n" % (len(CHUNK) + 10) + CHUNK,
    "no last chunk": b"%x\r\n" % len(CHUNK) + CHUNK + b"\r\n",
    "bare LF in trailers": b"%x\r\n" % len(CHUNK) + CHUNK + b"\r\n0\r\nX: y\nZ: 1\r\n\r\n",
}


@pytest.mark.slow
def test_malformed_chunked_framing_is_a_400_logged_as_a_client_error(
        gunicorn_server, make_token):
    server = gunicorn_server(workers=1)
    token = make_token()
    head = post_head(token, "Transfer-Encoding: chunked")
    for case, body in MALFORMED_CHUNKED.items():
        status, headers, answer = exchange(server.port, head + body)
        assert_refused_as_client_error(server, status, headers, answer), case
    assert "request body refused" in server.output()
    status, _, _ = exchange(server.port, head + b"%x\r\n" % len(CHUNK) + CHUNK
                            + b"\r\n0\r\n\r\n")
    assert status == 200
    assert Plant.select().count() == 1


@pytest.mark.slow
def test_a_body_shorter_than_its_content_length_is_a_400_and_creates_nothing(
        gunicorn_server, make_token):
    server = gunicorn_server(workers=1)
    token = make_token()
    body = b'{"id": 7, "name": "fern"}'
    status, headers, answer = exchange(
        server.port, post_head(token, "Content-Length: 500") + body)
    assert_refused_as_client_error(server, status, headers, answer)
    assert "500" in answer["message"] and str(len(body)) in answer["message"]
    assert Plant.select().count() == 0
    status, _, _ = exchange(
        server.port, post_head(token, f"Content-Length: {len(body)}") + body)
    assert status == 200
