"""The spool poster's file, read back (``core/hooks/poster.py``): whole, or nothing."""

from __future__ import annotations

import pytest

from codex_presence.core.hooks.poster import spool_script, spooled_hook


def test_a_spooled_file_gives_its_payload_and_the_pid_in_its_name() -> None:
    assert spooled_hook("4242.hook", b"2\n{}") == (b"{}", 4242)
    assert spooled_hook("7.hook", b"0\n") == (b"", 7)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("1.hook", b'9\n{"a":'),  # its poster killed mid-write
        ("1.hook", b"2\n{}x"),  # more than it says
        ("1.hook", b"{}"),  # no length
        ("1.hook", b"x\n{}"),
        ("1.hook", b"-2\n{}"),
        ("1.hook", b"9999999999999\n{}"),
        ("notes.hook.txt", b"2\n{}"),
        ("a1.hook", b"2\n{}"),
        ("1234567890123.hook", b"2\n{}"),  # no pid is that long
    ],
)
def test_what_is_not_a_whole_spooled_hook_is_none(name: str, data: bytes) -> None:
    assert spooled_hook(name, data) is None


def test_the_spool_script_writes_length_then_payload_never_over_a_file() -> None:
    script = spool_script("/run/private/spool", cat="/bin/cat")
    assert "set -C" in script  # noclobber: a file not read yet is never overwritten
    assert """printf '%d\\n%s' "${#body}" "$body" >'/run/private/spool'/$$'.hook'""" in script
