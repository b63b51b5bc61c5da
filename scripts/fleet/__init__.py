"""The fleet test: plantstore deployed on many hosts (network namespaces of
this machine) and the scenarios that check what holds across them. Run by
``make test-fleet``, as root; see docs/scaling.md."""
