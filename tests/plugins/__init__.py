"""pytest plugins of the suite, loaded by ``tests/conftest.py``: fixtures and
the helpers behind them that several test modules share."""
