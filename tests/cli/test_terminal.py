"""Untrusted text shown in a terminal: control characters visible, markup inert (issue 24 items 2, 3)."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from sporch.orchestrator.cli.terminal import shown, visible


def test_escapes_are_made_visible():
    assert visible("a\x1b]0;owned\x07b") == "a\\x1b]0;owned\\x07b"
    assert visible("\x1b[2J\x1b[31mred") == "\\x1b[2J\\x1b[31mred"
    assert visible("x\u202ey") == "x\\u202ey"
    assert visible("two\nlines\tok") == "two\nlines\tok"
    assert visible("two\nlines", one_line=True) == "two\\nlines"


def test_markup_is_printed_as_text():
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(f"folder {shown('/tmp/x/[/x]')} and {shown('[red]RED[/red]')}")
    assert out.getvalue().strip() == "folder /tmp/x/[/x] and [red]RED[/red]"


@given(st.text())
def test_nothing_that_acts_on_a_terminal_survives(text):
    out = visible(text, one_line=True)
    assert not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in out)
    out = io.StringIO()
    Console(file=out, width=100_000, color_system=None).print(shown(text, one_line=True), soft_wrap=True)
    assert "\x1b" not in out.getvalue()
