"""What both sending and subscriptions need of a subscription's receiver (the
HTTP endpoint it names): what its URL and bearer token may be
(``registration``), where it may lead (``ssrf``), and its signing secrets as
stored (``secrets``). Below both: neither ``sending`` nor ``subscriptions``
imports the other."""
