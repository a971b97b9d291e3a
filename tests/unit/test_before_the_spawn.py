"""The standard library's stand-ins that claude's runner uses before claude's spawn (issue 34:
no shutil, no base64 then) give the answers of what they stand in for."""

from __future__ import annotations

import base64
import os
import re
import shutil
from pathlib import Path

import pytest

from codex_presence.agent.hooks.listener import new_hook_path
from codex_presence.agent.installed import which


def test_a_hook_path_holds_24_random_bytes_url_safe() -> None:
    paths = {new_hook_path() for _ in range(200)}
    assert len(paths) == 200
    for path in paths:
        match = re.fullmatch(rb"/([A-Za-z0-9_-]{32})/hook", path)
        assert match is not None, path
        assert len(base64.urlsafe_b64decode(match[1])) == 24


@pytest.mark.parametrize(
    "command",
    ["prog", "sub/prog", "dir", "plain", "missing", "./prog"],
)
@pytest.mark.parametrize("path_kind", ["both", "second", "empty", "colon", "repeated", "none"])
def test_which_answers_as_shutil_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, path_kind: str
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for directory in (first, second, first / "sub", second / "dir"):
        directory.mkdir(parents=True, exist_ok=True)
    for runnable in (first / "prog", second / "prog", first / "sub" / "prog", tmp_path / "prog"):
        runnable.write_text("#!/bin/sh\n")
        runnable.chmod(0o755)
    (second / "plain").write_text("not runnable")
    monkeypatch.chdir(tmp_path)
    path = {
        "both": f"{first}{os.pathsep}{second}",
        "second": str(second),
        "empty": "",
        "colon": os.pathsep,  # the current directory
        "repeated": f"{second}{os.pathsep}{second}{os.pathsep}{first}",
        "none": None,
    }[path_kind]
    if path is None:
        monkeypatch.setenv("PATH", f"{second}{os.pathsep}{first}")
    assert which(command, path=path) == shutil.which(command, path=path)
    for mode in (os.F_OK, os.R_OK, os.X_OK):
        assert which(command, mode, path) == shutil.which(command, mode, path)
