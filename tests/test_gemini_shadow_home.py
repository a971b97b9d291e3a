"""The shadow gemini home (:mod:`codex_presence.agent.gemini.settings`) on real files: what
gemini sees in it, and what comes home at the end.

gemini itself is not needed to say what lands where: these tests play its part on the
files (a setting saved as ``/model`` saves it, a file made or replaced by a rename), and
``tests/test_gemini_presence.py`` runs the real gemini in such a home.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest

from codex_presence.agent.gemini.settings import SettingsError, ShadowHome, their_settings
from codex_presence.core.gemini.protocol import HOOK_EVENTS, HOOK_NAME

URL = "http://127.0.0.1:9/hook/secret"


def person(tmp_path: Path, settings: bytes | None) -> tuple[dict[str, str], Path]:
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    if settings is not None:
        (home / ".gemini" / "settings.json").write_bytes(settings)
    (home / ".gemini" / "installation_id").write_text("theirs\n")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "")}, private


def ours(hooks: object) -> list[str]:
    assert isinstance(hooks, dict)
    return [
        event
        for event, groups in hooks.items()
        for group in groups
        for hook in group["hooks"]
        if hook.get("name") == HOOK_NAME
    ]


def test_the_shadow_holds_their_settings_with_our_hooks_after_theirs_and_links_the_rest(
    tmp_path: Path,
) -> None:
    theirs = {"name": "mine", "type": "command", "command": "true"}
    env, private = person(
        tmp_path,
        b'{\n  // my model\n  "model": {"name": "gemini-2.5-pro"}, /* a "quote" */\n'
        b'  "mcp": {"url": "http://x//y /* not a comment */"},\n'
        b'  "hooks": {"BeforeAgent": [{"hooks": [' + orjson.dumps(theirs) + b"]}]}\n}\n",
    )
    added = ShadowHome(private, env).make(URL, env)
    assert added == {"GEMINI_CLI_HOME": str(private)}
    shadow = private / ".gemini"
    document = orjson.loads((shadow / "settings.json").read_bytes())
    assert document["model"] == {"name": "gemini-2.5-pro"}
    assert document["mcp"] == {"url": "http://x//y /* not a comment */"}
    assert document["hooks"]["BeforeAgent"][0]["hooks"] == [theirs]
    assert sorted(ours(document["hooks"])) == sorted(HOOK_EVENTS)
    assert URL not in (shadow / "settings.json").read_text()  # a path to the poster only
    home = Path(env["HOME"]) / ".gemini"
    for name in ("installation_id", "tmp", "history"):  # tmp, history: made ahead, theirs
        assert (shadow / name).is_symlink() and (shadow / name).resolve() == home / name
    assert oct((shadow / "settings.json").stat().st_mode & 0o777) == "0o600"


def test_a_setting_changed_in_the_session_is_saved_to_theirs_without_our_hooks(
    tmp_path: Path,
) -> None:
    env, private = person(tmp_path, b'{"ui": {"theme": "Default"}, "general": {"x": 1}}')
    shadow_home = ShadowHome(private, env)
    shadow_home.make(URL, env)
    settings = private / ".gemini" / "settings.json"
    document = orjson.loads(settings.read_bytes())
    document["model"] = {"name": "gemini-2.5-flash"}  # /model, as gemini saves it
    del document["general"]
    settings.write_bytes(orjson.dumps(document))
    home_settings = Path(env["HOME"]) / ".gemini" / "settings.json"
    meanwhile = orjson.loads(home_settings.read_bytes())  # another session changed theirs
    meanwhile["ui"]["theme"] = "Dracula"
    home_settings.write_bytes(orjson.dumps(meanwhile))

    shadow_home.give_back()
    assert their_settings(env) == {
        "ui": {"theme": "Dracula"},  # not ours to undo: the session did not change it
        "model": {"name": "gemini-2.5-flash"},
    }


def test_settings_with_comments_are_not_rewritten_and_the_change_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    original = b'{\n  // keep me\n  "ui": {"theme": "Default"}\n}\n'
    env, private = person(tmp_path, original)
    shadow_home = ShadowHome(private, env)
    shadow_home.make(URL, env)
    settings = private / ".gemini" / "settings.json"
    document = orjson.loads(settings.read_bytes())
    document["ui"]["theme"] = "Dracula"
    settings.write_bytes(orjson.dumps(document))
    shadow_home.give_back()
    assert (Path(env["HOME"]) / ".gemini" / "settings.json").read_bytes() == original
    assert "ui.theme" in caplog.text


def test_what_gemini_made_or_replaced_in_the_shadow_comes_home(tmp_path: Path) -> None:
    env, private = person(tmp_path, None)
    shadow_home = ShadowHome(private, env)
    shadow_home.make(URL, env)
    shadow = private / ".gemini"
    (shadow / "projects.json").write_text('{"projects": {}}')  # new: made in the shadow
    (shadow / "installation_id").unlink()  # replaced by a rename: the link is gone
    (shadow / "installation_id").write_text("new\n")
    (shadow / "extensions" / "one").mkdir(parents=True)
    (shadow / "extensions" / "one" / "x.json").write_text("{}")
    shadow_home.give_back()
    home = Path(env["HOME"]) / ".gemini"
    assert (home / "projects.json").read_text() == '{"projects": {}}'
    assert (home / "installation_id").read_text() == "new\n"
    assert (home / "extensions" / "one" / "x.json").read_text() == "{}"
    assert not (home / "settings.json").exists()  # nothing changed: nothing written
    (shadow / "tmp" / "chat.jsonl").write_text("{}\n")  # through the link: theirs
    shutil.rmtree(private)  # as the session ends: its links go, what they name stays
    assert (home / "tmp" / "chat.jsonl").read_text() == "{}\n"
    assert (home / "installation_id").read_text() == "new\n"
    assert (home / "tmp").is_dir() and (home / "history").is_dir()


def test_settings_that_are_not_json_are_an_error_naming_the_file(tmp_path: Path) -> None:
    env, _ = person(tmp_path, b'{"ui": ')
    with pytest.raises(SettingsError, match=r"\.gemini/settings\.json are not JSON"):
        their_settings(env)
    env, _ = person(tmp_path / "b", b"[1]")
    with pytest.raises(SettingsError, match="not a JSON object"):
        their_settings(env)
