"""The web board: every session live in a browser, served by the daemon (`anvild --web`).

`WebBoard` (server.py) is the daemon child; `board_app` (app.py) the routes over the session
APIs; `EventHub` (hub.py) the numbered SSE feed from the same broadcasts as the 9P `events`
files; `Guard` (auth.py) the token, cookie, CSRF and Host checks; static/ the pages.
"""

from anvild.web.app import board_app, session_info
from anvild.web.auth import Guard, Guarded
from anvild.web.beads import BeadActions
from anvild.web.hub import EventHub, FeedItem, Gap
from anvild.web.server import (
    WebAddress,
    WebAddressError,
    WebBoard,
    WebSettings,
    parse_web_address,
    web_settings,
)

__all__ = [
    "BeadActions",
    "EventHub",
    "FeedItem",
    "Gap",
    "Guard",
    "Guarded",
    "WebAddress",
    "WebAddressError",
    "WebBoard",
    "WebSettings",
    "board_app",
    "parse_web_address",
    "session_info",
    "web_settings",
]
