"""Sending: the processes that attempt deliveries and what one attempt is.

``worker`` and ``web_sender`` run attempts in ``slots`` shared fairly between
owners, ``outcome_writer`` records them; ``sender`` makes one HTTP attempt
under a hard ``deadline``, to an address ``ssrf`` allows, ``signing`` its
headers; ``maintenance`` is the worker's housekeeping; ``spans`` its traces.
"""
