"""Subscriptions: the ``/webhooks`` API, who hears about what, and the secrets.

``routes`` and ``schemas`` are the API, ``store`` every write of a
subscription's own row, ``audience`` who hears and who sees, ``secrets`` the
rotation of signing secrets and ``stored_secrets`` the secrets as stored
across every subscription. What a receiver's URL and bearer token may be is
``webhooks/receivers/``, which ``sending`` reads too.
"""
