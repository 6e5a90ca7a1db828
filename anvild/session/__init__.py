"""anvild.session: the session supervisor (DESIGN sections 4, 5, 7 and 8).

state.py    the lifecycle states and the one transition table
errors.py   SessionError and its subclasses
stream.py   LineBroadcast: the `log` and `events` streams (per-reader cursors, lag markers)
"""
