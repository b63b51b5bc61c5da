"""Sending: the processes that attempt deliveries and what one attempt is.

``worker`` and ``web_sender`` run attempts in ``slots`` shared fairly between
owners, ``outcome_writer`` records them; ``sender`` makes one HTTP attempt
under a hard ``deadline``, to an address ``webhooks/receivers/ssrf.py``
allows (``pinned_address``), ``signing`` its headers; ``spans`` its traces.
"""
