"""The web board end to end: a real daemon with `--web`, the fake provider, Playwright driving
Debian's chromium (never a downloaded browser), and plain HTTP for the security checks.

One daemon and one browser serve the whole module (each test makes its own session), so the
module stays well under a minute. `ANVIL_UPDATE_SCREENSHOTS=1` rewrites docs/web-board.png,
docs/web-session.png, docs/web-beads.png and docs/web-spend.png from the pages as the tests see
them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_session_verbs_e2e import tool_messages, write_call
from tests.integration.test_sessions_e2e import FakeServer, anvilctl, ok, read, user_config

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 20_000
DOCS = Path(__file__).resolve().parents[2] / "docs"
PRICED_AND_BUDGETED = (
    "\n[models.fake.pricing]\ninput = 1.5\noutput = 6.0\n"  # USD per million tokens
    "\n[budget]\ndaily_tokens = 100000000\n"
)
XSS = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'

TURNS: list[dict[str, Any]] = [
    {"contains": "stream please", "text": "first words, then the rest of them", "piece": 11,
     "hold": 2},
    {"contains": "write a", "tool_calls": [write_call("wa", "a.txt", "a\n")]},
    {"contains": "Created", "text": "a is written"},
    {"contains": "write b", "tool_calls": [write_call("wb", "b.txt", "b\n")]},
    {"contains": "not that file", "text": "understood, b stays unwritten"},
    {"contains": "plan it", "tool_calls": [{"name": "todo_write", "arguments": {"todos": [
        {"content": "write the board", "status": "in_progress"},
        {"content": "test it", "status": "pending"}]}}]},
    {"contains": "write the board", "text": "planned", "hold": 1},
    {"contains": "many", "text": "streaming along " * 12, "piece": 12, "chunk_delay": 0.05,
     "repeat": True},
    {"text": "pong", "repeat": True},
]  # fmt: skip


class Board:
    """The module's daemon, fake provider, namespace and board URL."""

    def __init__(self, root: Path) -> None:
        self.namespace = root / "ns"
        self.work = root / "work"
        self.work.mkdir()
        self.fake = FakeServer(root, TURNS)
        config = user_config(root, self.fake.url)
        config.write_text(config.read_text() + PRICED_AND_BUDGETED)
        self.daemon = Anvild(self.namespace, "--config", str(config), "--web", "127.0.0.1:0")
        self.daemon.wait_serving()
        line = self.daemon.wait_serving("web board ")
        found = re.search(r"web board (http://127\.0\.0\.1:\d+/)\?token=TOKEN", line)
        assert found, line
        self.url = found.group(1)
        self.token = (self.namespace / "agent.token").read_text().strip()

    def new_session(self, *words: str) -> str:
        return ok(anvilctl(self.namespace, "new", *words, cwd=self.work)).strip()

    @contextmanager
    def client(self) -> Iterator[httpx.Client]:
        """An HTTP client logged in with the token (the cookie set)."""
        with httpx.Client(base_url=self.url, timeout=10) as client:
            reply = client.get("/", params={"token": self.token})
            assert reply.status_code == 303, reply.text
            yield client

    def csrf(self, client: httpx.Client) -> str:
        page = client.get("/").text
        found = re.search(r'<meta name="csrf" content="([0-9a-f]{64})">', page)
        assert found, page
        return found.group(1)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Board]:
    b = Board(tmp_path_factory.mktemp("web"))
    try:
        yield b
    finally:
        code, log = b.daemon.stop()
        b.fake.stop()
    assert code == 0, log


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, board: Board) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    p = context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    refused = "the server responded with a status of 409"  # a refusal the page shows

    def console(message: Any) -> None:
        if message.type == "error" and refused not in message.text:
            errors.append(message.text)

    p.on("console", console)
    p.goto(f"{board.url}?token={board.token}")
    yield p
    context.close()
    assert errors == []


def session_page(page: Any, board: Board, sid: str) -> None:
    page.goto(f"{board.url}session/{sid}")
    page.locator("#live.up").wait_for(timeout=WAIT_MS)


# --- security -----------------------------------------------------------------------------


def test_without_the_token_everything_is_401_and_names_nothing(board: Board) -> None:
    sid = board.new_session("alias=secretive")
    with httpx.Client(base_url=board.url, timeout=10) as anonymous:
        for path in ("/", "/api/sessions", f"/api/sessions/{sid}", f"/session/{sid}",
                     "/events?after=0", "/static/board.js", "/no/such/page"):  # fmt: skip
            reply = anonymous.get(path)
            assert reply.status_code == 401, path
            assert sid not in reply.text
            assert "secretive" not in reply.text
            assert "content-security-policy" in reply.headers
        assert anonymous.get("/", params={"token": "0" * 64}).status_code == 401
        forged = {"cookie": "anvil_board=nonce.0123"}
        assert anonymous.get("/api/sessions", headers=forged).status_code == 401
        reply = anonymous.post(f"/api/sessions/{sid}/prompt", json={"text": "hi"})
        assert reply.status_code == 401
    assert read(board.namespace, f"agent/{sid}/queue") == ""


def test_the_token_once_then_an_httponly_strict_cookie_and_a_strict_csp(board: Board) -> None:
    sid = board.new_session()
    with httpx.Client(base_url=board.url, timeout=10) as client:
        reply = client.get("/session/x", params={"token": board.token, "keep": "1"})
        assert reply.status_code == 303
        assert reply.headers["location"] == "/session/x?keep=1"  # the token leaves the URL
        cookie = reply.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie
        assert "Path=/" in cookie
        assert board.token not in cookie
        reply = client.get(board.url.rstrip("/") + "//evil.example/", params={"token": board.token})
        assert reply.headers["location"] == "/evil.example/"  # a path here, never another host
        reply = client.get("/api/sessions")
        assert reply.status_code == 200
        assert sid in [s["id"] for s in reply.json()["sessions"]]
        csp = reply.headers["content-security-policy"]
        assert "default-src 'none'" in csp
        assert "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert reply.headers["x-content-type-options"] == "nosniff"


def test_a_cross_site_or_tokenless_post_changes_nothing(board: Board) -> None:
    sid = board.new_session()
    with board.client() as client:
        csrf = board.csrf(client)
        own = board.url.rstrip("/")
        attempts = [
            {"origin": "http://evil.example", "x-anvil-csrf": csrf},
            {"origin": own, "x-anvil-csrf": csrf, "sec-fetch-site": "cross-site"},
            {"x-anvil-csrf": csrf},  # no Origin
            {"origin": own},  # no CSRF token
            {"origin": own, "x-anvil-csrf": "0" * 64},
        ]
        for headers in attempts:
            reply = client.post(f"/api/sessions/{sid}/prompt", json={"text": "hi"}, headers=headers)
            assert reply.status_code == 403, (headers, reply.text)
        assert read(board.namespace, f"agent/{sid}/first_prompt") == "-\n"
        reply = client.post(
            f"/api/sessions/{sid}/prompt",
            json={"text": "hi"},
            headers={"origin": own, "x-anvil-csrf": csrf},
        )
        assert reply.status_code == 200, reply.text
        assert ok(anvilctl(board.namespace, "wait", sid)) == "await\n"
        assert read(board.namespace, f"agent/{sid}/first_prompt") == "hi\n"


def test_a_rebound_host_name_is_refused(board: Board) -> None:
    port = board.url.rstrip("/").rpartition(":")[2]
    with board.client() as client:
        reply = client.get("/api/sessions", headers={"host": f"evil.example:{port}"})
        assert reply.status_code == 421
        assert client.get("/api/sessions", headers={"host": f"localhost:{port}"}).status_code == 200


def test_refusals_come_back_verbatim(board: Board) -> None:
    sid = board.new_session()
    with board.client() as client:
        headers = {"origin": board.url.rstrip("/"), "x-anvil-csrf": board.csrf(client)}
        reply = client.post(f"/api/sessions/{sid}/ctl", json={"command": "cancel"}, headers=headers)
        assert reply.status_code == 409
        assert reply.json() == {
            "error": f"no turn is running (session {sid} is idle): nothing to cancel"
        }
        reply = client.get("/api/sessions/nosuch")
        assert reply.status_code == 404
        assert reply.json()["error"].startswith("no session 'nosuch'")


# --- in the browser -----------------------------------------------------------------------


def test_a_session_created_through_9p_appears_live(page: Any, board: Board) -> None:
    page.locator("#live.up").wait_for(timeout=WAIT_MS)
    sid = board.new_session("alias=appears", "role=reviewer")
    row = page.locator(f'#sessions tr[data-id="{sid}"]')
    row.wait_for(timeout=WAIT_MS)
    assert "appears" in row.inner_text()
    assert "reviewer" in row.inner_text()
    page.select_option("#role", "reviewer")
    assert page.locator("#sessions tbody tr").count() == sum(
        1 for line in read(board.namespace, "agent/list").splitlines() if "\treviewer\t" in line
    )


def test_streamed_text_arrives_as_it_streams(page: Any, board: Board) -> None:
    sid = board.new_session()
    session_page(page, board, sid)
    ok(anvilctl(board.namespace, "send", sid, "stream please"))
    turns = page.locator("#turns")
    turns.locator(".text", has_text="first words").wait_for(timeout=WAIT_MS)
    assert "the rest" not in turns.inner_text()  # the provider holds the rest
    assert page.locator("#turns .line.end").count() == 0
    # Two prompts queued behind the held turn: listed live, as the `queue` file shows them.
    ok(anvilctl(board.namespace, "send", sid, "queued one"))
    ok(anvilctl(board.namespace, "send", sid, "queued two"))
    queue = page.locator("#queue")
    queue.filter(has_text="queued two").wait_for(timeout=WAIT_MS)
    listed = read(board.namespace, f"agent/{sid}/queue")
    assert re.fullmatch(r"p\d+\tqueued one\np\d+\tqueued two\n", listed), listed
    assert queue.inner_text().strip() == listed.strip()
    board.fake.release()
    page.locator("#turns .line.end", has_text="turn done").first.wait_for(timeout=WAIT_MS)
    assert "first words, then the rest of them" in turns.inner_text()
    queue.filter(has_text="(empty)").wait_for(timeout=WAIT_MS)  # drained: both ran
    page.locator("#turns .line.end", has_text="turn done").nth(2).wait_for(timeout=WAIT_MS)
    page.locator("#out", has_text="pong").wait_for(timeout=WAIT_MS)
    assert read(board.namespace, f"agent/{sid}/queue") == ""


def test_approve_a_tool_call_from_the_page(page: Any, board: Board) -> None:
    sid = board.new_session()
    session_page(page, board, sid)
    page.fill("#prompt", "write a")
    page.click("#send")
    box = page.locator(".approval", has_text="write_file")
    box.wait_for(timeout=WAIT_MS)
    assert "a.txt" in box.inner_text()
    if os.environ.get("ANVIL_UPDATE_SCREENSHOTS"):
        page.screenshot(path=str(DOCS / "web-session.png"), full_page=True)
        overview = page.context.new_page()  # the board while this session waits for a person
        overview.goto(board.url)
        overview.locator("#sessions tr.needs").first.wait_for(timeout=WAIT_MS)
        overview.screenshot(path=str(DOCS / "web-board.png"), full_page=True)
        overview.close()
    box.locator("button.approve").click()
    page.locator("#turns .line.end", has_text="turn done").wait_for(timeout=WAIT_MS)
    assert page.locator(".approval").count() == 0
    assert "approval approve" in page.locator("#turns").inner_text()
    assert (board.work / "a.txt").read_text() == "a\n"
    page.locator("#out", has_text="a is written").wait_for(timeout=WAIT_MS)

    turn = page.locator('#changes details.turn[data-number="1"]')  # agent/ID/turns/1
    turn.locator("pre.changes", has_text="a.txt").wait_for(timeout=WAIT_MS, state="attached")
    assert turn.locator("pre.changes").text_content() == read(
        board.namespace, f"agent/{sid}/turns/1/changes"
    )
    turn.locator("summary").click()
    turn.locator("pre.diff", has_text="+a").wait_for(timeout=WAIT_MS)
    assert turn.locator("pre.diff").inner_text().strip() == (
        read(board.namespace, f"agent/{sid}/turns/1/diff").strip()
    )
    page.click("#undo")  # what `undo` on ctl does: the turn's write is taken back
    deadline = time.monotonic() + WAIT_MS / 1000
    while (board.work / "a.txt").exists():
        assert time.monotonic() < deadline, page.locator("#error").inner_text()
        time.sleep(0.05)
    assert page.locator("#error").inner_text() == ""


def test_reject_with_a_reason_reaches_the_model(page: Any, board: Board) -> None:
    sid = board.new_session()
    session_page(page, board, sid)
    ok(anvilctl(board.namespace, "send", sid, "write b"))
    box = page.locator(".approval", has_text="write_file")
    box.wait_for(timeout=WAIT_MS)
    box.locator("button.reject").click()  # no reason yet: refused on the page
    page.locator("#error", has_text="write a reason to reject").wait_for(timeout=WAIT_MS)
    box.locator("input.reason").fill("not that file")
    box.locator("button.reject").click()
    page.locator("#turns .line.end", has_text="turn done").wait_for(timeout=WAIT_MS)
    assert "approval reject: not that file" in page.locator("#turns").inner_text()
    assert tool_messages(board.fake.requests()[-1])["wb"] == (
        "ERROR: Permission denied for write_file: the user rejected this call and said: "
        "not that file"
    )
    assert not (board.work / "b.txt").exists()


def test_a_prompt_with_markup_is_shown_as_text(page: Any, board: Board) -> None:
    sid = board.new_session("alias=markup")
    session_page(page, board, sid)
    page.fill("#prompt", XSS)
    page.click("#send")
    page.locator("#turns .line.end", has_text="turn done").wait_for(timeout=WAIT_MS)
    page.goto(board.url)
    row = page.locator(f'#sessions tr[data-id="{sid}"]')
    row.wait_for(timeout=WAIT_MS)
    assert row.locator("td.prompt").inner_text() == XSS
    assert page.locator("#sessions script, #sessions img").count() == 0
    assert page.evaluate("window.pwned") is None
    session_page(page, board, sid)
    assert page.locator("#info dd", has_text=XSS).count() == 1
    assert page.evaluate("window.pwned") is None
    assert page.evaluate("window.anvilStats.maxMs") < 50


def test_an_error_is_shown_verbatim_on_the_page(page: Any, board: Board) -> None:
    sid = board.new_session()
    session_page(page, board, sid)
    page.click("#cancel")
    page.locator("#error").filter(has_text="nothing to cancel").wait_for(timeout=WAIT_MS)
    assert page.locator("#error").inner_text() == (
        f"no turn is running (session {sid} is idle): nothing to cancel"
    )


def test_a_board_address_other_machines_could_reach_is_refused(tmp_path: Path) -> None:
    daemon = Anvild(tmp_path / "ns", "--web", "0.0.0.0:8080")
    code, log = daemon.exit()
    assert code == 2
    assert "the web board address '0.0.0.0:8080' is not a loopback address" in log
    assert "--allow-remote" in log


def test_follow_a_convoy_to_completion_claiming_and_approving_from_the_page(
    page: Any, board: Board
) -> None:
    ns = board.namespace

    def ctl(path: str, line: str) -> str:
        return ok(anvilctl(ns, "rdwr", path, stdin=line + "\n")).split()[-1]

    convoy = ctl("agent/convoys/ctl", 'new "Board convoy" "Ship it"')
    a = ctl("agent/beads/ctl", f'new "Research" developer "" convoy={convoy} requires_approval')
    b = ctl("agent/beads/ctl", f'new "Build" developer "" {a} convoy={convoy}')
    page.goto(f"{board.url}beads")
    page.locator("#live.up").wait_for(timeout=WAIT_MS)
    card = page.locator(f'.convoy[data-id="{convoy}"]')
    card.filter(has_text="0/2 0%").wait_for(timeout=WAIT_MS)
    nodes = page.locator("#graph svg g.node")  # the graph: b's column is right of a's, joined
    a_box = nodes.filter(has_text=a).bounding_box()
    b_box = nodes.filter(has_text=b).bounding_box()
    assert a_box is not None
    assert b_box is not None
    assert b_box["x"] > a_box["x"] + a_box["width"]
    assert page.locator("#graph svg line.edge").count() >= 1

    row_a = page.locator(f'#beads tr[data-id="{a}"]')
    row_a.locator("input.who").fill("nosuch")
    row_a.locator("button.claim").click()
    page.locator("#error").filter(has_text="no live session 'nosuch'").wait_for(timeout=WAIT_MS)
    row_a.locator("input.who").fill("user")
    row_a.locator("button.claim").click()
    row_a.locator("td.state", has_text="in_progress").wait_for(timeout=WAIT_MS)
    assert read(ns, f"agent/beads/{a}/assigned_to") == "user\n"

    ok(anvilctl(ns, "write", f"agent/beads/{a}/ctl", stdin="complete notes\n"))  # through 9P
    row_a.locator("td.state", has_text="pending_approval").wait_for(timeout=WAIT_MS)
    row_a.locator("button.approve").click()
    row_a.locator("td.state", has_text="completed").wait_for(timeout=WAIT_MS)
    card.filter(has_text="1/2 50%").wait_for(timeout=WAIT_MS)
    if os.environ.get("ANVIL_UPDATE_SCREENSHOTS"):
        page.screenshot(path=str(DOCS / "web-beads.png"), full_page=True)

    worker = board.new_session("alias=convoy-worker")
    row_b = page.locator(f'#beads tr[data-id="{b}"]')
    row_b.locator("input.who").fill("convoy-worker")  # an alias, resolved as the file does
    row_b.locator("button.claim").click()
    row_b.locator("td.state", has_text="in_progress").wait_for(timeout=WAIT_MS)
    assert read(ns, f"agent/beads/{b}/assigned_to") == f"{worker}\n"

    page.goto(board.url)  # the board filtered by the convoy shows its worker only
    page.locator(f'#sessions tr[data-id="{worker}"]').wait_for(timeout=WAIT_MS)
    page.select_option("#convoy", convoy)
    assert page.locator("#sessions tbody tr").count() == 1
    assert page.locator("#sessions tbody tr").get_attribute("data-id") == worker

    page.goto(f"{board.url}beads")
    page.locator("#live.up").wait_for(timeout=WAIT_MS)
    ok(anvilctl(ns, "write", f"agent/beads/{b}/ctl", stdin="complete\n"))
    card.filter(has_text="2/2 100%").wait_for(timeout=WAIT_MS)
    card.filter(has_text="completed").wait_for(timeout=WAIT_MS)
    assert read(ns, f"agent/convoys/{convoy}/status") == "completed\n"


def hourly_spend(board: Board) -> dict[str, tuple[int, float]]:
    """(input + output tokens, USD) per hour of session start, summed from every session's own
    `cost` and `created` (the board's per-hour chart reads the records instead)."""
    spend: dict[str, tuple[int, float]] = {}
    with board.client() as client:
        for info in client.get("/api/sessions").json()["sessions"]:
            cost = client.get(f"/api/sessions/{info['id']}").json()["cost"]
            value = dict(line.split(" ", 1) for line in cost.splitlines() if " " in line)
            hour = info["created"][:13] + ":00Z"
            tokens, usd = spend.get(hour, (0, 0.0))
            spend[hour] = (
                tokens + int(value["input"]) + int(value["output"]),
                usd + float(value["usd"]),
            )
    return spend


def test_spend_charts_tokens_and_cost_per_hour_and_model_and_follows_a_turn(
    page: Any, board: Board
) -> None:
    sid = board.new_session("role=tester")
    page.goto(f"{board.url}spend")
    page.locator("#live.up").wait_for(timeout=WAIT_MS)
    listed = [line for line in read(board.namespace, "agent/list").splitlines() if line]
    fake = page.locator('#models tr[data-name="fake"]')
    fake.wait_for(timeout=WAIT_MS)
    assert fake.locator("td").nth(1).inner_text() == str(len(listed))
    tester = page.locator('#roles tr[data-name="tester"] td')
    before = int(tester.nth(2).inner_text())
    ok(anvilctl(board.namespace, "send", sid, "count my tokens"))
    assert ok(anvilctl(board.namespace, "wait", sid)) == "await\n"
    cost = read(board.namespace, f"agent/{sid}/cost")
    found = re.search(r"^input (\d+)$", cost, re.MULTILINE)
    assert found, cost
    spent = int(found.group(1))
    page.locator('#roles tr[data-name="tester"] td').nth(2).filter(
        has_text=str(before + spent)
    ).wait_for(timeout=WAIT_MS)

    # The charts: one bar per hour and model, its numbers those of the sessions' `cost` files.
    # An hour only its request-less sessions started in has no bar (a run across the hour).
    expected = {hour: spent for hour, spent in hourly_spend(board).items() if spent[0]}
    assert sum(usd for _, usd in expected.values()) > 0  # the fake model is priced
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:00Z")
    if set(expected) != {now}:  # sessions of an earlier hour: their requests may be in a later one
        page.wait_for_function(
            "total => [...document.querySelectorAll('#tokens-chart rect.bar')]"
            ".reduce((sum, bar) => sum + Number(bar.dataset.value), 0) === total",
            arg=sum(tokens for tokens, _ in expected.values()),
            timeout=WAIT_MS,
        )
        expected = {}
    for hour, (tokens, usd) in expected.items():
        bar = page.locator(f'#tokens-chart rect.bar[data-hour="{hour}"][data-model="fake"]')
        bar.and_(page.locator(f'[data-value="{tokens}"]')).wait_for(timeout=WAIT_MS)
        assert f"{hour} fake: {tokens} tokens" in bar.locator("title").text_content()
        drawn = page.locator(f'#usd-chart rect.bar[data-hour="{hour}"][data-model="fake"]')
        rounding = 1e-6 * len(listed)  # each `cost` gives its USD to six places
        assert float(drawn.get_attribute("data-value")) == pytest.approx(usd, abs=rounding)
    if expected:
        assert page.locator("#tokens-chart rect.bar").count() == len(expected)
    assert page.locator("#legend .key").all_inner_texts() == ["fake"]
    assert page.locator("#undated").is_hidden()  # every request recorded its time
    budget = read(board.namespace, "agent/budget")
    assert budget.startswith("daemon daily_tokens limit=100000000 spent=")  # the config's
    page.locator("#budget").filter(has_text=budget.strip()).wait_for(timeout=WAIT_MS)
    assert page.locator("#budget").inner_text().strip() == budget.strip()
    if os.environ.get("ANVIL_UPDATE_SCREENSHOTS"):
        page.screenshot(path=str(DOCS / "web-spend.png"), full_page=True)


def sse_events(
    reply: httpx.Response, until: Callable[[list[tuple[str, str, str]]], bool]
) -> list[tuple[str, str, str]]:
    """(id, event, data) of each SSE message of `reply` until `until(messages)` holds."""
    got: list[tuple[str, str, str]] = []
    fields: dict[str, str] = {}
    for line in reply.iter_lines():
        if line == "":
            if "data" in fields:
                got.append((fields.get("id", ""), fields.get("event", "message"), fields["data"]))
                if until(got):
                    return got
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
    raise AssertionError(f"the stream ended after {got}")


def created_ids(messages: list[tuple[str, str, str]]) -> list[str]:
    return [
        json.loads(data)["event"]["id"]
        for _, kind, data in messages
        if kind == "message" and json.loads(data)["event"]["type"] == "session_created"
    ]


def test_the_feed_resumes_after_a_reconnect_without_a_gap(board: Board) -> None:
    with board.client() as client:
        start = client.get("/api/sessions").json()["seq"]
        first = board.new_session()
        with client.stream("GET", "/events", params={"after": start}, timeout=30) as reply:
            before = sse_events(reply, lambda got: first in created_ids(got))
        missed = board.new_session()  # created while no stream is open
        last_id = before[-1][0]
        later = board.new_session()
        headers = {"last-event-id": last_id}
        with client.stream("GET", "/events", headers=headers, timeout=30) as reply:
            after = sse_events(reply, lambda got: later in created_ids(got))
        with client.stream("GET", "/events", params={"after": start}, timeout=30) as reply:
            whole = sse_events(reply, lambda got: later in created_ids(got))
    assert created_ids(after)[:2] == [missed, later]
    assert before + after == whole  # nothing lost, nothing twice
    # A position of another daemon run: a reload, never a guess.
    with (
        board.client() as client,
        client.stream("GET", "/events", headers={"last-event-id": "0000-5"}) as reply,
    ):
        (reset,) = sse_events(reply, lambda got: True)
    assert reset[1] == "reset"


def test_todos_change_live_while_the_turn_runs(page: Any, board: Board) -> None:
    sid = board.new_session()
    session_page(page, board, sid)
    ok(anvilctl(board.namespace, "send", sid, "plan it"))
    todos = page.locator("#todos")
    todos.filter(has_text="in_progress\twrite the board").wait_for(timeout=WAIT_MS)
    assert "pending\ttest it" in todos.inner_text()
    assert page.locator("#turns .line.end").count() == 0  # the provider holds the answer
    board.fake.release()
    page.locator("#turns .line.end", has_text="turn done").wait_for(timeout=WAIT_MS)


def test_compact_and_model_switch_from_the_page(page: Any, board: Board) -> None:
    sid = board.new_session()
    ok(anvilctl(board.namespace, "send", sid, "hello"))
    assert ok(anvilctl(board.namespace, "wait", sid)) == "await\n"
    session_page(page, board, sid)
    page.fill("#model", "nosuch")
    page.click("#switch")
    page.locator("#error").filter(has_text="nosuch").wait_for(timeout=WAIT_MS)
    refusal = page.locator("#error").inner_text()
    written = anvilctl(board.namespace, "write", f"agent/{sid}/ctl", stdin="model nosuch\n")
    assert written.returncode != 0
    assert refusal in written.stderr  # the file's refusal, word for word
    page.click("#compact")
    page.locator("#turns .line.note", has_text="compacted:").wait_for(timeout=WAIT_MS)
    assert read(board.namespace, f"agent/{sid}/compactions").count("manual") == 1


def test_mail_to_the_person_arrives_live_is_marked_read_and_answered(
    page: Any, board: Board
) -> None:
    ns = board.namespace
    sid = board.new_session("alias=mailer")
    page.goto(f"{board.url}mail")
    page.locator("#live.up").wait_for(timeout=WAIT_MS)
    draft = {"to": "user", "type": "QUESTION", "subject": "which port?", "body": "<b>8080</b>?"}
    ok(anvilctl(ns, "write", f"agent/{sid}/outbox", stdin=json.dumps(draft)))
    unread = page.locator("#unread .message", has_text="which port?")
    unread.wait_for(timeout=WAIT_MS)
    assert unread.locator("pre").inner_text() == "<b>8080</b>?"  # text, never markup
    page.click("#mark-read")
    page.locator("#received .message", has_text="which port?").wait_for(timeout=WAIT_MS)
    assert page.locator("#unread .message").count() == 0
    assert json.loads(read(ns, "agent/user/inbox")) == []

    page.fill("#to", "nobody-here")
    page.fill("#body", "hello")
    page.click("#send")
    page.locator("#error", has_text="no live session has the id or alias 'nobody-here'").wait_for(
        timeout=WAIT_MS
    )
    page.fill("#to", "mailer")
    page.select_option("#type", "ANSWER")
    page.fill("#subject", "re: which port?")
    page.fill("#body", "8080")
    page.click("#send")
    page.locator("#sent .message", has_text="re: which port?").wait_for(timeout=WAIT_MS)
    [got] = json.loads(read(ns, f"agent/{sid}/inbox"))
    assert (got["from"], got["type"], got["body"]) == ("user", "ANSWER", "8080")


def test_the_board_stays_responsive_with_a_hundred_sessions_streaming(
    page: Any, board: Board
) -> None:
    """100 sessions take a prompt at once and stream their answers; the board shows every one,
    and no event or redraw takes long in the browser (window.anvilStats). Measured alone: under
    1 ms an event and 10 ms a redraw (README, docs/PERF.md); the bound here is five times the
    50 ms target, because `make test` runs this beside another worker on two shared cores, and
    still catches a board whose redraw grows with the number of sessions."""
    page.locator("#live.up").wait_for(timeout=WAIT_MS)
    lines = "".join(f"new cwd={board.work} alias=many{n}\n" for n in range(100))
    out = ok(anvilctl(board.namespace, "rdwr", "agent/ctl", stdin=lines))
    ids = [line for line in out.splitlines() if line]
    assert len(ids) == 100
    page.locator(f'#sessions tr[data-id="{ids[-1]}"]').wait_for(timeout=WAIT_MS)
    with board.client() as client:
        headers = {"origin": board.url.rstrip("/"), "x-anvil-csrf": board.csrf(client)}
        for sid in ids:
            reply = client.post(
                f"/api/sessions/{sid}/prompt", json={"text": "many"}, headers=headers
            )
            assert reply.status_code == 200, reply.text
    page.select_option("#state", "await")
    page.wait_for_function(
        'ids => ids.every(id => document.querySelector(`#sessions tr[data-id="${id}"]`))',
        arg=ids,
        timeout=60_000,
    )
    stats = page.evaluate("window.anvilStats")
    print(f"board stats with 100 streaming sessions: {stats}")
    assert stats["batches"] >= 100
    assert stats["maxMs"] < 250, stats
    assert stats["renderMaxMs"] < 250, stats
    # Reloads are coalesced: one request at a time, at most one each 500 ms (timers may fire
    # a little early), far fewer than the 400 lines that changed what the board shows.
    assert stats["maxInFlight"] == 1, stats
    assert stats["minGapMs"] >= 450, stats
    assert stats["snapshots"] < stats["batches"] / 4, stats


def test_a_new_session_from_the_board_as_agent_ctl_makes_it(page: Any, board: Board) -> None:
    page.locator("#live.up").wait_for(timeout=WAIT_MS)
    page.fill("#new-args", f"cwd={board.work} role=nosuchrole")
    page.click("#new")
    page.locator("#error").filter(has_text="nosuchrole").wait_for(timeout=WAIT_MS)
    line = f"new cwd={board.work} role=nosuchrole\n"
    refused = anvilctl(board.namespace, "write", "agent/ctl", stdin=line)
    assert refused.returncode != 0
    assert page.locator("#error").inner_text() in refused.stderr  # word for word
    page.fill("#new-args", f"cwd={board.work} alias=from-the-page role=reviewer")
    page.click("#new")
    page.wait_for_url(re.compile(r".*/session/\w+$"), timeout=WAIT_MS)
    sid = page.url.rpartition("/")[2]
    assert read(board.namespace, f"agent/{sid}/alias") == "from-the-page\n"
    assert read(board.namespace, f"agent/{sid}/role") == "reviewer\n"


def test_an_open_board_follows_the_daemon_across_a_restart(browser: Any, tmp_path: Path) -> None:
    """The page's stream resumes with the old run's Last-Event-ID: it is told to reset, reloads,
    and goes on live (the cookie holds: the token is kept across restarts)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    namespace, work = tmp_path / "ns", tmp_path / "work"
    work.mkdir()
    fake = FakeServer(tmp_path, [{"text": "pong", "repeat": True}])
    config = str(user_config(tmp_path, fake.url))
    args = ("--config", config, "--web", f"127.0.0.1:{port}")
    daemon = Anvild(namespace, *args)
    context = browser.new_context()
    try:
        daemon.wait_serving("web board ")
        token = (namespace / "agent.token").read_text().strip()
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/?token={token}")
        page.locator("#live.up").wait_for(timeout=WAIT_MS)
        before = ok(anvilctl(namespace, "new", cwd=work)).strip()
        page.locator(f'#sessions tr[data-id="{before}"]').wait_for(timeout=WAIT_MS)
        code, log = daemon.stop()
        assert code == 0, log
        page.locator("#live.down").wait_for(timeout=WAIT_MS)
        daemon = Anvild(namespace, *args)
        daemon.wait_serving("web board ")
        page.locator("#live.up").wait_for(timeout=WAIT_MS)
        after = ok(anvilctl(namespace, "new", cwd=work)).strip()
        page.locator(f'#sessions tr[data-id="{after}"]').wait_for(timeout=WAIT_MS)
        assert page.locator(f'#sessions tr[data-id="{before}"]').count() == 1  # restored
    finally:
        context.close()
        code, log = daemon.stop()
        fake.stop()
    assert code == 0, log
