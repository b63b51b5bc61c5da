"""Sending: the processes that attempt deliveries and what one attempt is.

``worker`` and ``web_sender`` run attempts in ``slots`` shared fairly between
owners, ``attempt`` checks each against its subscription as it is now and
``outcome_writer`` records them; ``http_post`` makes one HTTP attempt under a
hard ``deadline``, over ``guarded`` connections (kept per subscription by
``connections``, within the ``descriptors`` budget, answers read past
``interim`` ones), to an address ``webhooks/receivers/ssrf.py`` allows
(``pinned_address``), ``signing`` its headers; ``own_trouble`` gives back what a process cannot
send; ``spans`` its traces.
"""
