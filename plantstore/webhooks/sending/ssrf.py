"""Where webhooks registered through the API may be sent: public addresses only.

A URL chosen by a client is hostile until checked. ``check_url`` is the
registration check: a well-formed receiver URL (``receivers.url_problem``)
whose host is not a numeric trick and resolves only to addresses
``Policy.permits``. At every send,
``PinnedAddressAdapter`` resolves and checks again and connects to the
address it checked (keeping the Host header and the TLS server name and
certificate check on the URL's host), so DNS cannot change the answer
between check and connect. Every lookup is given up after a timeout (the
connect timeout), so a name whose DNS never answers holds no one (``lookup``).

``requests-hardened`` was evaluated first: it checks only the first address
a name resolves to and can allow loopback but no other network, so it
covers neither "resolves only to public addresses" nor the operator's
allowlist (``PLANTSTORE_WEBHOOK_ALLOWED_NETWORKS``).
"""
import concurrent.futures
import ipaddress
import os
import re
import socket
import threading
from urllib.parse import urlsplit

import requests
from requests.structures import CaseInsensitiveDict

from ..subscriptions.receivers import url_problem
from .guarded import GuardedAdapter

LOOKUPS_AT_ONCE = 32
"""Lookup threads per process. A lookup is given up at its timeout, but its
thread stays with the system resolver until that answers or gives up (its
own timeout and retries, see resolv.conf), and a process that stops waits
for it; meanwhile further lookups queue for a thread, within their own
timeout."""

# Not public, whatever ipaddress.is_global says on this Python: the issue's
# ranges, named so a reader can check them against it.
BLOCKED_NETWORKS = tuple(ipaddress.ip_network(net) for net in (
    "0.0.0.0/8",          # "this network"
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",  # RFC 1918
    "100.64.0.0/10",      # carrier-grade NAT
    "127.0.0.0/8",        # loopback
    "169.254.0.0/16",     # link-local, cloud metadata (169.254.169.254)
    "192.0.0.0/24",       # IETF protocol assignments
    "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24",  # documentation
    "192.88.99.0/24",     # 6to4 relay anycast
    "198.18.0.0/15",      # benchmarking
    "224.0.0.0/4",        # multicast
    "240.0.0.0/4",        # reserved, and broadcast
    "::/127",             # unspecified, loopback
    "::/96",              # IPv4-compatible (deprecated)
    "64:ff9b::/96", "64:ff9b:1::/48",  # NAT64: IPv4 behind a translator
    "100::/64",           # discard
    "2001::/23",          # IETF protocol assignments
    "2001:db8::/32", "3fff::/20",  # documentation
    "2002::/16",          # 6to4: IPv4 inside
    "fc00::/7",           # unique local
    "fe80::/10",          # link-local
    "fec0::/10",          # site-local (deprecated)
    "ff00::/8",           # multicast
))

# Each dot-separated part of a host written as numbers (inet_aton accepts
# decimal, octal and hex parts, and fewer than four of them).
_NUMERIC_PART = re.compile(r"(0x[0-9a-f]*|[0-9]+)", re.IGNORECASE)


class ForbiddenAddress(requests.ConnectionError):
    """The receiver's host is, or resolves to, an address webhooks may not reach."""


class LookupTimeout(socket.gaierror):
    """The system resolver did not answer within the lookup's timeout."""


_resolver_lock = threading.Lock()
_resolver = (None, None)  # ((pid, LOOKUPS_AT_ONCE), the lookup threads' executor)


def _resolver_of_this_process():
    """This process's lookup threads (a forked child starts its own, and so
    does a change of ``LOOKUPS_AT_ONCE``)."""
    global _resolver
    with _resolver_lock:
        made_for, executor = _resolver
        if made_for != (os.getpid(), LOOKUPS_AT_ONCE):
            executor = concurrent.futures.ThreadPoolExecutor(
                LOOKUPS_AT_ONCE, thread_name_prefix="webhook-lookup")
            _resolver = ((os.getpid(), LOOKUPS_AT_ONCE), executor)
        return executor


def lookup(host, port, timeout):
    """``socket.getaddrinfo`` for a TCP connection to ``host``, given up after
    ``timeout`` seconds (``LookupTimeout``): a name whose DNS never answers
    holds neither the caller nor more than one lookup thread."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:  # an address literal: nothing to ask a resolver
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    future = _resolver_of_this_process().submit(socket.getaddrinfo, host, port,
                                                type=socket.SOCK_STREAM)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()  # if still queued behind lookups the resolver holds
        raise LookupTimeout(f"{host} did not resolve within {timeout:g}s") from None


class Policy:
    """Which addresses API subscriptions may reach: public unicast ones, and
    those inside the operator's ``allowed`` networks. Names are looked up
    within ``lookup_seconds``."""

    def __init__(self, allowed=(), lookup_seconds=2.0):
        self.allowed = tuple(allowed)
        self.lookup_seconds = lookup_seconds

    def permits(self, address):
        """True when ``address`` (an ipaddress address) may be connected to.

        An IPv4-mapped IPv6 address (``::ffff:127.0.0.1``) is judged as the
        IPv4 address it carries.
        """
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in self.allowed):
            return True
        if not address.is_global or address.is_multicast:
            return False
        return not any(address in network for network in BLOCKED_NETWORKS)

    def resolve(self, host, port):
        """The addresses ``host`` resolves to, if every one is permitted.

        Raises ``ForbiddenAddress`` naming the refused address, or
        ``socket.gaierror`` when the host does not resolve (``LookupTimeout``
        when not within ``lookup_seconds``).
        """
        infos = lookup(host, port, self.lookup_seconds)
        addresses = []
        for family, _, _, _, sockaddr in infos:
            if family not in (socket.AF_INET, socket.AF_INET6):
                continue
            address = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
            if not self.permits(address):
                raise ForbiddenAddress(
                    f"{host} resolves to {address}, which is not a public address")
            if address not in addresses:
                addresses.append(address)
        if not addresses:
            raise socket.gaierror(f"{host} has no IPv4 or IPv6 address")
        return addresses


def is_numeric_trick(host):
    """True for a host written as numbers but not as a dotted quad or an IPv6
    literal: ``2130706433``, ``0x7f.1``, ``017700000001``, ``127.1``."""
    parts = host.rstrip(".").split(".")
    if not all(_NUMERIC_PART.fullmatch(part) for part in parts):
        return False
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return True
    return False


ALLOWING_OTHER_NETWORKS = (
    "The operator may allow private or loopback networks with the setting "
    "PLANTSTORE_WEBHOOK_ALLOWED_NETWORKS (e.g. 127.0.0.0/8 for a receiver on the "
    "same machine), documented in docs/webhooks.md, \"Which URLs are accepted\".")


def check_url(url, policy):
    """None if ``url`` may be registered under ``policy``; else why not (a sentence)."""
    problem = url_problem(url)
    if problem:
        return problem
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port
    if is_numeric_trick(host):
        return f"The host {host!r} must be a name, a dotted-quad IPv4 or an IPv6 address."
    try:
        policy.resolve(host, port or (443 if parts.scheme == "https" else 80))
    except ForbiddenAddress as error:
        return f"Must reach a public address: {error}. {ALLOWING_OTHER_NETWORKS}"
    except LookupTimeout:
        return (f"The host {host!r} did not resolve within {policy.lookup_seconds:g}s; "
                "try again later.")
    except (socket.gaierror, UnicodeError):
        return f"The host {host!r} does not resolve."
    return None


class PinnedAddressAdapter(GuardedAdapter):
    """The sender's transport adapter (hard deadline per attempt), checking
    the receiver's address at every send and connecting to the address it
    checked.

    The pool is keyed on that address (within one subscription's adapter,
    see ``connections``); the request keeps its Host header,
    and over TLS the server name (SNI) and the certificate check stay on the
    URL's host.
    """

    def __init__(self, policy, **kwargs):
        self.policy = policy
        super().__init__(**kwargs)

    def build_connection_pool_key_attributes(self, request, verify, cert=None):
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(
            request, verify, cert)
        host, port = host_params["host"], host_params["port"]
        if is_numeric_trick(host):
            raise ForbiddenAddress(f"{host} is a numeric host that is not an address")
        try:
            address = self.policy.resolve(host, port)[0]
        except LookupTimeout as error:
            raise requests.ConnectionError(str(error)) from None
        except (socket.gaierror, UnicodeError) as error:
            raise requests.ConnectionError(f"{host} does not resolve ({error})") from None
        request.headers = CaseInsensitiveDict(request.headers)
        literal = f"[{host}]" if ":" in host else host
        default_port = 443 if host_params["scheme"] == "https" else 80
        shown_port = "" if port in (None, default_port) else f":{port}"
        request.headers["Host"] = literal + shown_port
        if host_params["scheme"] == "https":
            pool_kwargs["server_hostname"] = host
            pool_kwargs["assert_hostname"] = host
        host_params["host"] = str(address)
        return host_params, pool_kwargs

