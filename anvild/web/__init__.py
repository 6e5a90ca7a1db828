"""The web board: every session live in a browser, served by the daemon (`anvild --web`).

`WebBoard` (server.py) is the daemon child; `board_app` (app.py) the routes over the session
APIs; `EventHub` (hub.py) the numbered SSE feed from the same broadcasts as the 9P `events`
files; `Guard` (auth.py) the token, cookie, CSRF and Host checks; static/ the pages.
Only the address checks (address.py) are imported here: the rest loads when the board is on.
"""

from anvild.web.address import (
    WebAddress,
    WebAddressError,
    WebSettings,
    parse_web_address,
    web_settings,
)

__all__ = ["WebAddress", "WebAddressError", "WebSettings", "parse_web_address", "web_settings"]
