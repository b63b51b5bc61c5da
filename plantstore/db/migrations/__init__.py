"""Numbered schema migrations, applied in order by `plantstore db upgrade`."""
