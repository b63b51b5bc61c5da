"""Housekeeping: the tasks that keep the database within its bounds, one
module per task (``old_deliveries``, ``idempotency_keys``,
``secret_overlaps``, ``stray_deliveries``), and the one ``runner`` that
runs them. The webhook worker runs it between claims (``plantstore
worker`` hands it to the worker): every deployment with a database needs at
least one worker running, even with no webhook subscriptions.
"""
