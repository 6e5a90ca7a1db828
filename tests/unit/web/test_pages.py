"""The board's pages: each page's `<main>` in the one shared template, with its own script and
no inline one (the CSP allows scripts from the board's files only)."""

from __future__ import annotations

import re

import pytest

from anvild.web.app import NAV, PAGES, STATIC, page_html


@pytest.mark.parametrize("name", list(PAGES))
def test_every_page_is_its_main_in_the_shared_template(name: str) -> None:
    html = page_html(name)
    assert html.startswith("<!doctype html>")
    assert html.count("<main") == 1
    assert re.findall(r"\{\{(\w+)\}\}", html) == ["csrf"]  # filled per request
    scripts = re.findall(r"<script([^>]*)>", html)
    assert scripts == [' src="/static/common.js"', f' src="/static/{name}.js"']
    assert f"{name}.js" in STATIC
    assert "<style" not in html
    assert re.search(r"\son\w+=", html) is None  # no inline event handler either
    links = re.findall(r"<nav>(.*)</nav>", html)[0]
    path = PAGES[name][0]
    assert [where for where, _ in NAV if where != path] == re.findall(r'href="([^"]+)"', links)
