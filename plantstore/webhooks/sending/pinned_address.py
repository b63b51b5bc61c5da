"""The sender's transport adapter for subscriptions registered through the
API: the address is checked at every send (``receivers/ssrf.py``'s policy)
and connected to as checked."""
import socket

import requests
from requests.structures import CaseInsensitiveDict

from ..receivers.ssrf import ForbiddenAddress, LookupTimeout, is_numeric_trick
from .guarded import GuardedAdapter


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

