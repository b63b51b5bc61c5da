"""The delivery engine: a delivery's state and every decision about it, no HTTP.

``queue`` is the one door to a delivery's state, ``rules`` decides, ``store``
applies (one store per backend, its named SQL beside it), ``throttle`` keeps a
subscription's rate, ``job`` is a leased delivery, ``backlog`` watches what
waits. Nothing here imports from a higher layer (see the layout test).
"""
