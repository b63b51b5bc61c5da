"""The "New Plant" webhook: the outbox, signing, sending and the worker."""
