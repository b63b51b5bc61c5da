"""Operators' view of webhooks: the ``plantstore webhooks``, ``deliveries``,
``worker`` and ``keys`` commands, and the gauges on ``/metrics``."""
