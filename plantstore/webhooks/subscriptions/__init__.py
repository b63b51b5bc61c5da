"""Subscriptions: the ``/webhooks`` API, who hears about what, and the secrets.

``routes`` and ``schemas`` are the API, ``receivers`` what a receiver's URL
and bearer token may be, ``audience`` who hears and who sees, ``secrets`` and
``stored_secrets`` the signing secrets as used and as stored.
"""
