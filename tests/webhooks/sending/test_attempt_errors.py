"""What the delivery log says when a receiver gives no answer, in the words
of its reader: each case is a real party on loopback (a closed port, a
receiver that never answers, one that hangs up, one that speaks no HTTP,
one whose body ends short of its Content-Length, one sending a 1 MB header
line, a TLS receiver whose certificate nobody trusts or whose handshake
stalls, a name that does not resolve), each named by its real cause, and
the log never shows a class name, a repr or the HTTP library's internals."""
import contextlib
import socket
import ssl
import threading

import pytest
import trustme

from helpers import bearer, create_plant, free_port
from plugins.webhooks import QUICK_TIMEOUTS, subscribe, wait_for_attempts

LOOPBACK = {"WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}
READ = QUICK_TIMEOUTS["WEBHOOK_READ_TIMEOUT"]
CONNECT = QUICK_TIMEOUTS["WEBHOOK_CONNECT_TIMEOUT"]
INTERNALS = ("Connection(", "Pool(", "Errno", "Error", "host=", "Max retries", "<", "'")


class RawReceiver:
    """A TCP listener on loopback that treats each connection with ``behave``."""

    def __init__(self, behave, backlog=16, accept=True):
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=backlog)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        self.behave, self.held, self.stopped = behave, [], threading.Event()
        if accept:
            threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stopped.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(connection)
            threading.Thread(target=self.behave, args=(connection,), daemon=True).start()

    def stop(self):
        self.stopped.set()
        for connection in [*self.held, self.listener]:
            with contextlib.suppress(OSError):
                connection.close()


@pytest.fixture
def raw_receiver():
    started = []

    def start(behave=None, **kwargs):
        receiver = RawReceiver(behave, **kwargs)
        started.append(receiver)
        return receiver
    yield start
    for receiver in started:
        receiver.stop()


def never_answer(connection):
    connection.recv(65536)  # and then nothing, until the test ends


def read_request(connection):
    """Read one whole request (headers and Content-Length body), for at most
    10 s: closing with part of it unread would make the kernel answer with
    a reset."""
    connection.settimeout(10)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in data:
            chunk = connection.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            chunk = connection.recv(65536)
            if not chunk:
                return
            body += chunk


def hang_up(connection):
    read_request(connection)
    connection.close()


def speak_ssh(connection):
    connection.recv(65536)
    connection.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    connection.close()


def logged_errors(client, token, subscription_id):
    """The delivery log as its reader sees it: (last_error, [attempt errors])."""
    response = client.get(f"/webhooks/{subscription_id}/deliveries", headers=bearer(token))
    assert response.status_code == 200, response.data
    [delivery] = response.get_json()
    return delivery["last_error"], [attempt["error"] for attempt in delivery["attempts"]]


def assert_logged(client, admin, subscription_id, expected):
    wait_for_attempts(1)
    last_error, [attempt_error] = logged_errors(client, admin, subscription_id)
    assert last_error == attempt_error == expected
    assert not any(part in expected for part in INTERNALS), expected


def test_a_closed_port_is_connection_refused(client, runner, alice, admin):
    subscription_id, _ = subscribe(runner, f"http://127.0.0.1:{free_port()}/hook")
    create_plant(client, alice, 1)
    assert_logged(client, admin, subscription_id, "connection refused")


@pytest.mark.app_config(LOOPBACK)
def test_a_closed_port_registered_through_the_api_is_connection_refused(client, alice):
    created = client.post("/webhooks", json={"url": f"http://127.0.0.1:{free_port()}/hook"},
                          headers=bearer(alice))
    assert created.status_code == 201, created.data
    create_plant(client, alice, 1)
    assert_logged(client, alice, created.get_json()["id"], "connection refused")


@pytest.mark.app_config(QUICK_TIMEOUTS)
def test_a_receiver_that_never_answers_timed_out_after_the_read_timeout(
        client, runner, alice, admin, raw_receiver):
    subscription_id, _ = subscribe(runner, raw_receiver(never_answer).url)
    create_plant(client, alice, 1)
    assert_logged(client, admin, subscription_id,
                  f"timed out after {READ:g} s waiting for the answer")


@pytest.mark.app_config(QUICK_TIMEOUTS)
def test_a_receiver_that_never_accepts_timed_out_connecting(
        client, runner, alice, admin, raw_receiver):
    full = raw_receiver(backlog=0, accept=False)
    port = full.listener.getsockname()[1]
    # Fill the listener's queue: the kernel then drops the sender's SYNs.
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    try:
        subscription_id, _ = subscribe(runner, full.url)
        create_plant(client, alice, 1)
        assert_logged(client, admin, subscription_id,
                      f"timed out after {CONNECT:g} s connecting")
    finally:
        for filler in fillers:
            filler.close()


def test_a_receiver_that_hangs_up_closed_the_connection_without_an_answer(
        client, runner, alice, admin, raw_receiver):
    subscription_id, _ = subscribe(runner, raw_receiver(hang_up).url)
    create_plant(client, alice, 1)
    assert_logged(client, admin, subscription_id,
                  "connection closed by the receiver without an answer")


def test_a_receiver_that_speaks_no_http_is_said_so(client, runner, alice, admin,
                                                   raw_receiver):
    subscription_id, _ = subscribe(runner, raw_receiver(speak_ssh).url)
    create_plant(client, alice, 1)
    assert_logged(client, admin, subscription_id, "the answer is not HTTP")


def test_https_to_a_plain_port_is_a_failed_tls_handshake(client, runner, alice, admin,
                                                         raw_receiver):
    url = raw_receiver(speak_ssh).url.replace("http://", "https://")
    subscription_id, _ = subscribe(runner, url)
    create_plant(client, alice, 1)
    assert_logged(client, admin, subscription_id,
                  "TLS handshake failed (is the receiver serving HTTPS on that port?)")


def test_a_certificate_nobody_trusts_is_tls_certificate_not_trusted(
        client, runner, alice, admin, raw_receiver):
    unknown_ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    unknown_ca.issue_cert("127.0.0.1").configure_cert(context)

    def serve_tls(connection):
        with contextlib.suppress(OSError):
            context.wrap_socket(connection, server_side=True).recv(65536)

    url = raw_receiver(serve_tls).url.replace("http://", "https://")
    subscription_id, _ = subscribe(runner, url)
    create_plant(client, alice, 1)
    assert_logged(client, admin, subscription_id,
                  "TLS certificate not trusted (issuer unknown)")


def answer_cut_short(connection):
    read_request(connection)
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly this")
    connection.close()


def answer_a_huge_header_line(connection):
    read_request(connection)
    with contextlib.suppress(OSError):
        connection.sendall(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 1_000_000 + b"\r\n\r\n")
    connection.close()


def test_a_body_cut_short_of_its_content_length_is_said_so(client, runner, alice, admin,
                                                           raw_receiver):
    subscription_id, _ = subscribe(runner, raw_receiver(answer_cut_short).url)
    create_plant(client, alice, 1)
    assert_logged(client, admin, subscription_id,
                  "the answer ended before its declared length (9 of 1000 bytes)")


def test_a_header_line_of_a_megabyte_is_said_to_be_too_long(client, runner, alice, admin,
                                                            raw_receiver):
    subscription_id, _ = subscribe(runner, raw_receiver(answer_a_huge_header_line).url)
    create_plant(client, alice, 1)
    assert_logged(client, admin, subscription_id,
                  "a header line of the answer is too long (over 65536 bytes)")


@pytest.mark.app_config({"WEBHOOK_CONNECT_TIMEOUT": 0.3, "WEBHOOK_READ_TIMEOUT": 5.0})
def test_a_stalled_tls_handshake_is_said_so_not_a_wait_for_the_answer(
        client, runner, alice, admin, raw_receiver):
    url = raw_receiver(never_answer).url.replace("http://", "https://")
    subscription_id, _ = subscribe(runner, url)
    create_plant(client, alice, 1)
    assert_logged(client, admin, subscription_id, "timed out after 0.3 s in the TLS handshake")


def test_a_name_that_does_not_resolve_is_name_not_resolved(client, runner, alice, admin):
    subscription_id, _ = subscribe(runner, "http://receiver.invalid/hook")
    create_plant(client, alice, 1)
    assert_logged(client, admin, subscription_id, "name not resolved")


def test_the_cli_shows_the_same_words(client, runner, alice):
    subscribe(runner, f"http://127.0.0.1:{free_port()}/hook")
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    shown = runner.invoke(args=["deliveries", "list"])
    assert shown.exit_code == 0 and "connection refused" in shown.output, shown.output
    assert "Errno" not in shown.output and "Connection(" not in shown.output
