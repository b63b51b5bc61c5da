"""SSRF: a webhook URL chosen by a client reaches public addresses only,
checked at registration and again at every send, on the checked address."""
import ipaddress
import socket
import threading
import time

import pytest
import requests

from helpers import assert_error, bearer
from plantstore.db.models import Attempt, Subscription, User
from plantstore.webhooks.receivers import ssrf
from plantstore.webhooks.sending.pinned_address import PinnedAddressAdapter
from plugins.webhooks import Answer, subscribe, verify, wait_for_attempts

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)
LOOKUP_SECONDS = 0.5
NEVER_ANSWERS = 60.0
"""Seconds a lookup of a name in ``dns.hanging`` takes (unless the test ends first)."""
GIVEN_UP_WITHIN = 20 * LOOKUP_SECONDS
"""What waits on such a lookup ends by then: the lookup is given up after
LOOKUP_SECONDS, and the request around it may crawl on a loaded machine,
but it ends long before the lookup would."""


@pytest.fixture
def dns(monkeypatch):
    """A resolver the test steers: ``dns.answers[name] = address`` answers
    a name, and lookups of the names in ``dns.hanging`` never end (until the
    test does), like a DNS server that never answers."""
    real, released = socket.getaddrinfo, threading.Event()
    steer = type("Dns", (), {"answers": {}, "hanging": set()})()

    def resolve(host, *args, **kwargs):
        if host in steer.hanging:
            released.wait(NEVER_ANSWERS)
            raise socket.gaierror("the resolver gave up")
        return real(steer.answers.get(host, host), *args, **kwargs)
    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    yield steer
    released.set()


REFUSED_HOSTS = [
    # loopback
    "127.0.0.1", "127.5.5.5", "localhost", "[::1]",
    # RFC 1918 and unique local
    "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "[fc00::1]", "[fd12:3456::1]",
    # link-local, cloud metadata
    "169.254.169.254", "169.254.0.1", "[fe80::1]",
    # carrier-grade NAT, "this network", unspecified
    "100.64.0.1", "100.127.255.254", "0.0.0.0", "0.1.2.3", "[::]",
    # multicast
    "224.0.0.1", "239.255.255.250", "[ff02::1]",
    # reserved, broadcast, benchmarking, documentation
    "240.0.0.1", "255.255.255.255", "198.18.0.1", "192.0.2.1", "198.51.100.1",
    "203.0.113.1", "[2001:db8::1]",
    # IPv4-mapped IPv6 forms, and IPv4 inside NAT64 and 6to4
    "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::ffff:10.0.0.1]",
    "[::ffff:169.254.169.254]", "[::ffff:192.168.0.1]", "[::ffff:100.64.0.1]",
    "[64:ff9b::a9fe:a9fe]", "[2002:7f00:1::]",
    # numeric tricks
    "2130706433", "0x7f.1", "017700000001", "0x7f000001", "127.1", "0177.0.0.1",
    "0x7f.0x0.0x0.0x1",
]


@pytest.mark.parametrize("host", REFUSED_HOSTS)
def test_registration_refuses_every_non_public_address_form_with_400_naming_url(
        client, alice, host):
    response = client.post("/webhooks", json={"url": f"http://{host}:8080/hook"},
                           headers=bearer(alice))
    assert "url" in assert_error(response, 400)["details"]
    assert Subscription.select().count() == 0


@pytest.mark.parametrize("url", ["http://127.0.0.1:9000/plants", "http://localhost:9000/",
                                 "http://10.1.2.3/hook", "http://[::1]:9000/"])
def test_a_refused_private_or_loopback_url_names_the_setting_that_allows_it_and_its_doc(
        client, alice, url):
    response = client.post("/webhooks", json={"url": url}, headers=bearer(alice))
    [refusal] = assert_error(response, 400)["details"]["url"]
    assert "is not a public address" in refusal
    assert "PLANTSTORE_WEBHOOK_ALLOWED_NETWORKS" in refusal
    assert "127.0.0.0/8" in refusal and "docs/webhooks.md" in refusal
    assert Subscription.select().count() == 0


@pytest.mark.parametrize("url", ["http://no-such-host.invalid/hook",
                                 "https://nothing.example.invalid:8443/"])
def test_a_host_that_does_not_resolve_is_400(client, alice, url):
    response = client.post("/webhooks", json={"url": url}, headers=bearer(alice))
    body = assert_error(response, 400)
    assert "does not resolve" in body["details"]["url"][0]


@pytest.mark.app_config({"WEBHOOK_CONNECT_TIMEOUT": LOOKUP_SECONDS})
def test_a_name_whose_lookup_never_ends_is_refused_within_the_connect_timeout(
        client, alice, dns, monkeypatch):
    # More names than the lookups one process runs at once (2 here): the
    # last ones find them all taken by names the resolver never answers.
    monkeypatch.setattr(ssrf, "LOOKUPS_AT_ONCE", 2)
    for name in range(4):
        dns.hanging.add(f"n{name}.test")
        started = time.monotonic()
        response = client.post("/webhooks", json={"url": f"http://n{name}.test/hook"},
                               headers=bearer(alice))
        assert time.monotonic() - started < GIVEN_UP_WITHIN
        [refusal] = assert_error(response, 400)["details"]["url"]
        assert f"did not resolve within {LOOKUP_SECONDS:g}s" in refusal
    # Addresses need no lookup, and the API goes on answering.
    assert client.post("/webhooks", json={"url": "http://8.8.8.8/hook"},
                       headers=bearer(alice)).status_code == 201
    assert client.get("/plants", headers=bearer(alice)).status_code == 200
    assert Subscription.select().count() == 1


@pytest.mark.parametrize("url", ["http://8.8.8.8/hook", "https://1.1.1.1:8443/x",
                                 "http://[2606:4700:4700::1111]/hook"])
def test_public_addresses_are_accepted_on_any_port(client, alice, url):
    response = client.post("/webhooks", json={"url": url}, headers=bearer(alice))
    assert response.status_code == 201, response.data


@pytest.mark.parametrize("address", [
    "127.0.0.1", "10.1.2.3", "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1",
    "240.0.0.1", "192.0.2.1", "::1", "fc00::1", "fe80::1", "ff02::1", "::ffff:127.0.0.1",
    "::ffff:10.0.0.1", "2001:db8::1", "64:ff9b::7f00:1", "2002:a00:1::"])
def test_the_policy_refuses_non_public_addresses(address):
    assert not ssrf.Policy().permits(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111",
                                     "::ffff:8.8.8.8"])
def test_the_policy_permits_public_unicast_addresses(address):
    assert ssrf.Policy().permits(ipaddress.ip_address(address))


def test_the_operators_allowlist_permits_its_networks_and_nothing_more():
    policy = ssrf.Policy(LOOPBACK)
    assert policy.permits(ipaddress.ip_address("127.0.0.1"))
    assert policy.permits(ipaddress.ip_address("::ffff:127.0.0.2"))
    assert not policy.permits(ipaddress.ip_address("10.0.0.1"))
    assert not policy.permits(ipaddress.ip_address("169.254.169.254"))


def test_a_name_is_refused_when_any_of_its_addresses_is_not_public(monkeypatch):
    def resolve(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("8.8.8.8", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port))]
    monkeypatch.setattr(ssrf.socket, "getaddrinfo", resolve)
    with pytest.raises(ssrf.ForbiddenAddress, match="10.0.0.1"):
        ssrf.Policy().resolve("mixed.test", 80)


def test_numeric_tricks_stay_refused_even_when_the_allowlist_covers_them(alice):
    refusal = ssrf.check_url("http://2130706433:8080/", ssrf.Policy(LOOPBACK))
    assert refusal and "2130706433" in refusal
    assert ssrf.check_url("http://127.0.0.1:8080/", ssrf.Policy(LOOPBACK)) is None


def test_https_keeps_the_server_name_and_certificate_check_on_the_urls_host():
    adapter = PinnedAddressAdapter(ssrf.Policy(LOOPBACK))
    request = requests.Request("POST", "https://localhost:8443/hook").prepare()

    host_params, pool_kwargs = adapter.build_connection_pool_key_attributes(request, True)

    assert (host_params["host"], host_params["port"]) == ("127.0.0.1", 8443)
    assert pool_kwargs["server_hostname"] == pool_kwargs["assert_hostname"] == "localhost"
    assert request.headers["Host"] == "localhost:8443"


class TestAtSendTime:
    @pytest.fixture
    def app_config(self):
        return {"WEBHOOK_RETRY_SCHEDULE": ""}

    @pytest.mark.slow
    def test_an_api_subscription_that_now_resolves_inside_is_not_sent_to(
            self, client, runner, alice, make_receiver):
        receiver = make_receiver()
        with client.application.app_context():
            owner = User.get(User.name == "alice")
            # As if its name resolved to a public address at registration.
            Subscription.create(owner=owner, url=receiver.url, secret="whsec_" + "A" * 44)
        operator_receiver = make_receiver()
        subscribe(runner, operator_receiver.url)  # the operator's: unrestricted

        response = client.post("/plants", json={"id": 1, "name": "fern"},
                               headers=bearer(alice))

        assert response.status_code == 200
        operator_receiver.wait_for(1)
        wait_for_attempts(2)
        assert receiver.requests == []
        errors = [attempt.error for attempt in Attempt.select()]
        assert any("not a public address" in (error or "") for error in errors), errors


class TestPinnedConnection:
    @pytest.fixture
    def app_config(self):
        return {"WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8", "WEBHOOK_RETRY_SCHEDULE": ""}

    @pytest.mark.slow
    def test_the_send_connects_to_the_checked_address_with_the_urls_host_header(
            self, client, alice, make_receiver, monkeypatch):
        receiver = make_receiver()
        real = socket.getaddrinfo
        lookups = []

        def resolve(host, *args, **kwargs):
            if host == "rebind.test":  # answers once; a second lookup would fail
                lookups.append(host)
                if len(lookups) > 2:
                    raise socket.gaierror("rebound")
                return real("127.0.0.1", *args, **kwargs)
            return real(host, *args, **kwargs)
        monkeypatch.setattr(socket, "getaddrinfo", resolve)
        url = f"http://rebind.test:{receiver.port}/hook"
        created = client.post("/webhooks", json={"url": url}, headers=bearer(alice))
        assert created.status_code == 201, created.data  # lookup 1

        client.post("/plants", json={"id": 1, "name": "fern"}, headers=bearer(alice))

        [got] = receiver.wait_for(1)  # lookup 2, then a connection to 127.0.0.1
        assert got.headers["host"] == f"rebind.test:{receiver.port}"
        assert verify(created.get_json()["secret"], got) == {"id": 1, "name": "fern"}
        assert len(lookups) == 2

    @pytest.mark.slow
    def test_redirects_are_not_followed(self, client, alice, make_receiver):
        elsewhere = make_receiver()
        receiver = make_receiver(answer=Answer(302, headers={"Location": elsewhere.url}))
        client.post("/webhooks", json={"url": receiver.url}, headers=bearer(alice))

        client.post("/plants", json={"id": 1, "name": "fern"}, headers=bearer(alice))

        receiver.wait_for(1)
        wait_for_attempts(1)
        assert elsewhere.requests == []
        [attempt] = Attempt.select()
        assert attempt.status_code == 302 and "not followed" in attempt.error


@pytest.mark.app_config({"WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8", "WEBHOOK_RETRY_SCHEDULE": "",
                         "WEBHOOK_CONNECT_TIMEOUT": LOOKUP_SECONDS})
def test_a_send_whose_lookup_never_ends_fails_within_the_connect_timeout(
        client, alice, make_receiver, dns):
    receiver = make_receiver()
    dns.answers["slow.test"] = "127.0.0.1"
    created = client.post("/webhooks", json={"url": f"http://slow.test:{receiver.port}/hook"},
                          headers=bearer(alice))
    assert created.status_code == 201, created.data
    dns.hanging.add("slow.test")

    client.post("/plants", json={"id": 1, "name": "fern"}, headers=bearer(alice))

    wait_for_attempts(1)
    [attempt] = Attempt.select()
    assert f"did not resolve within {LOOKUP_SECONDS:g}s" in attempt.error, attempt.error
    assert attempt.duration_ms < GIVEN_UP_WITHIN * 1000
    assert receiver.requests == []
