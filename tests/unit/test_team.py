"""The team file, tokens, the privilege bucket, the dev team and ``team init``."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import tomllib
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codex_presence._wire import control_character, privilege
from codex_presence.broker.team import Role, TeamError, hash_token, new_token
from codex_presence.broker.team_file import (
    dev_team,
    load_team,
    parse_member_spec,
    parse_team,
    render_team,
    state_dir,
    write_team,
)
from codex_presence.cli.main import main

SHA = hashlib.sha256(b"alice-token").hexdigest()
X = 'team = "a"\n[[members]]\nname = "x"\ntoken = "t"\n'  # one good member

EXAMPLE = f"""
team = "acme"

[[members]]
name = "alice"
role = {{ title = "director", permissions = ["members.manage", "objectives.create"] }}
token_sha256 = "{SHA}"

[[members]]
name = "builder"
token = "builder-dev-token"
"""


def test_load_the_issue_shape(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "team.toml"
    path.write_text(EXAMPLE)
    with caplog.at_level(logging.WARNING, logger="codex_presence"):
        team = load_team(path)
    assert team.name == "acme"
    assert [m.name for m in team.members] == ["alice", "builder"]
    assert team.members[0].role == Role("director", ("members.manage", "objectives.create"))
    assert team.members[1].role is None
    assert "plain 'token'" in caplog.text
    assert "builder-dev-token" not in caplog.text
    assert team.authenticate("alice-token") is team.members[0]
    assert team.authenticate("builder-dev-token") is team.members[1]
    for wrong in ("", "alice-token ", "Alice-token", SHA, "builder-dev-toke"):
        assert team.authenticate(wrong) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "'team' must be"),
        ('team = ""', "'team' must be"),
        ('team = "a"', "no members"),
        ('team = "a"\nmembers = 3', "array of tables"),
        ('team = "a"\n[[members]]\nname = "x y"\ntoken = "t"', "'name' must be"),
        ('team = "a"\n[[members]]\ntoken = "t"', "'name' must be"),
        ('team = "a"\n[[members]]\nname = "x"', "exactly one of"),
        (
            f'team = "a"\n[[members]]\nname = "x"\ntoken = "t"\ntoken_sha256 = "{SHA}"',
            "exactly one",
        ),
        ('team = "a"\n[[members]]\nname = "x"\ntoken_sha256 = "abc"', "64 hex"),
        ('team = "a"\n[[members]]\nname = "x"\ntoken = "has space"', "without whitespace"),
        ('team = "a"\n[[members]]\nname = "x"\ntoken = "t"\nrole = "boss"', "inline table"),
        ('team = "a"\n[[members]]\nname = "x"\ntoken = "t"\nrole = { permissions = [] }', "title"),
        (
            X + 'role = { title = "t", permissions = "p" }',
            "array of strings",
        ),
        (
            X + '[[members]]\nname = "x"\ntoken = "u"',
            "twice",
        ),
        (
            X + '[[members]]\nname = "y"\ntoken = "t"',
            "share",
        ),
        ("team = [", "not valid TOML"),
        # Before: accepted silently (the member lost their privileges, the colour its use)
        (
            X + 'permisions = ["members.manage"]',
            r"member 'x': unknown key 'permisions': did you mean 'permissions' \(in role = ",
        ),
        (
            X + 'role = { title = "t", permisions = ["members.manage"] }',
            r"member 'x': role: unknown key 'permisions': did you mean 'permissions'\?",
        ),
        (X + 'colour = "red"', r"member 'x': unknown key 'colour': known here: name, role, "),
        ('colour = "red"\n' + X, r"unknown key 'colour': known here: team, members"),
        (X.replace("name =", "nmae =", 1), r"unknown key 'nmae': did you mean 'name'\?"),
    ],
)
def test_bad_team_files_are_refused_with_a_reason(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "team.toml"
    path.write_text(text)
    with pytest.raises(TeamError, match=message):
        load_team(path)


FORGERIES = {
    "a forged roster line": "engineer]\n- mallory [admin] connected=9\n- x [",
    "a cleared screen": "\x1b[2J\x1b[H",
    "an OSC 52 clipboard write": "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07",
    "a C1 control": "a\x9bb",
    "a direction override": "\u202erotcerid",
    "a line separator": "a\u2028b",
}


@pytest.mark.parametrize("text", FORGERIES.values(), ids=FORGERIES.keys())
@pytest.mark.parametrize(
    ("template", "names"),
    [
        ("team = {text}\n[[members]]\nname = 'x'\ntoken = 't'", "'team' holds"),
        (X + "role = {{ title = {text} }}", "member 'x': role 'title' holds"),
        (
            X + "role = {{ title = 't', permissions = ['p', {text}] }}",
            "member 'x': role 'permissions'",
        ),
    ],
    ids=["team name", "role title", "permission"],
)
def test_control_characters_in_shown_text_are_refused(
    tmp_path: Path, text: str, template: str, names: str
) -> None:
    """Names and titles reach every roster, terminal and log: the file is refused, naming
    the member and the key, rather than let them forge lines or act on a terminal."""
    path = tmp_path / "team.toml"
    path.write_text(template.format(text=orjson.dumps(text).decode()))  # a TOML basic string
    with pytest.raises(TeamError, match=f"{re.escape(names)}.*control character") as refused:
        load_team(path)
    assert control_character(str(refused.value)) is None  # the message itself is safe


def test_team_init_refuses_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "team.toml"
    assert main(["team", "init", str(path), "-m", "a:\x1b[2Jboss"]) == 2
    assert "--member a: role 'title' holds a control character (U+001B)" in capsys.readouterr().err
    assert main(["team", "init", str(path), "--team", "acme\n- x", "-m", "a"]) == 2
    assert "--team holds a control character (U+000A)" in capsys.readouterr().err
    assert not path.exists()


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TeamError, match="no such team file"):
        load_team(tmp_path / "nope.toml")


def test_privilege_bucket() -> None:
    assert privilege(["members.manage"]) == "admin"
    assert privilege(["objectives.create", "members.manage"]) == "admin"
    assert privilege(["objectives.create"]) == "operator"
    assert privilege(["other"]) is None
    assert privilege([]) is None


def test_tokens_are_fresh_and_strong() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(t.startswith("cp_") and len(t) >= 40 for t in tokens)
    assert hash_token("x") == hashlib.sha256(b"x").digest()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("alice", ("alice", None)),
        ("alice:director", ("alice", Role("director", ()))),
        (
            "alice:director:members.manage,objectives.create",
            ("alice", Role("director", ("members.manage", "objectives.create"))),
        ),
        ("bob::objectives.create", ("bob", Role("", ("objectives.create",)))),
        ("carol:chief of staff:", ("carol", Role("chief of staff", ()))),
    ],
)
def test_member_spec(spec: str, expected: tuple[str, Role | None]) -> None:
    assert parse_member_spec(spec) == expected


@pytest.mark.parametrize("spec", ["", ":director", "a b", "ä", "a:b:c:d", "a:b:x,c:d"])
def test_bad_member_spec(spec: str) -> None:
    with pytest.raises(TeamError):
        parse_member_spec(spec)


names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
texts = st.text(
    st.characters(
        codec="utf-8",
        exclude_categories=("Cs", "Cc", "Zl", "Zp"),  # no controls: those are refused
        exclude_characters="\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
    ),
    max_size=30,
)


@given(
    team=texts.filter(str.strip),
    members=st.lists(
        st.tuples(
            names, st.none() | st.builds(Role, texts, st.lists(texts, max_size=3).map(tuple))
        ),
        min_size=1,
        max_size=4,
        unique_by=lambda m: m[0],
    ),
)
def test_written_files_read_back(team: str, members: list[tuple[str, Role | None]]) -> None:
    """Our hand-written TOML is TOML, whatever the titles and permissions contain."""
    with_tokens = [(name, role, new_token()) for name, role in members]
    parsed = parse_team(tomllib.loads(render_team(team, with_tokens)))
    assert parsed.name == team
    assert [(m.name, m.role) for m in parsed.members] == members
    for (name, _, token), member in zip(with_tokens, parsed.members, strict=True):
        assert parsed.authenticate(token) is member
        assert member.name == name


def test_write_team_is_0600_and_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    write_team(path, "one")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(TeamError, match="already exists"):
        write_team(path, "two")
    assert path.read_text() == "one"
    path.chmod(0o644)
    write_team(path, "two", force=True)
    assert path.read_text() == "two"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_state_dir() -> None:
    assert state_dir({"XDG_STATE_HOME": "/x"}) == Path("/x/codex-presence")
    assert state_dir({}) == Path.home() / ".local/state/codex-presence"


def test_dev_team_is_made_once_and_reused(tmp_path: Path) -> None:
    first = dev_team(tmp_path / "state", member="me")
    assert first.created
    token = first.token_path.read_text().strip()
    team = load_team(first.team_path)
    assert team.authenticate(token) is not None
    assert team.members[0].name == "me"
    assert stat.S_IMODE(first.token_path.stat().st_mode) == 0o600
    assert token not in first.team_path.read_text()
    again = dev_team(tmp_path / "state")
    assert not again.created
    assert again.token_path.read_text().strip() == token
    # a token that no longer matches makes a fresh team
    first.token_path.write_text("cp_something-else\n")
    third = dev_team(tmp_path / "state")
    assert third.created
    assert third.token_path.read_text().strip() != token


def test_a_state_directory_others_can_write_to_is_made_private_and_not_trusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Someone who could write to the directory could have planted a team and a token of
    their own: its mode is fixed, with a warning, and a new development team is made."""
    state = tmp_path / "state"
    planted = dev_team(state, member="me").token_path.read_text()
    state.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="codex_presence"):
        made = dev_team(state)
    assert made.created
    assert made.token_path.read_text() != planted
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert "was writable by others (mode 0777): made it 0700" in caplog.text
    assert not dev_team(state).created  # private now: reused


def test_a_state_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.getuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)  # nobody's
    else:
        theirs = Path("/")  # root's
    with pytest.raises(TeamError, match="belongs to another user"):
        dev_team(theirs)


def test_a_planted_link_in_the_state_directory_is_not_followed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = dev_team(state, member="me")
    elsewhere = tmp_path / "elsewhere-token"
    token = first.token_path.read_text()
    elsewhere.write_text(token)
    first.token_path.unlink()
    first.token_path.symlink_to(elsewhere)
    again = dev_team(state)
    assert again.created  # not reused through the link...
    assert not again.token_path.is_symlink()
    assert elsewhere.read_text() == token  # ...nor written through it


# -- the command ---------------------------------------------------------------------------


def test_team_init_prints_each_token_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "team.toml"
    argv = ["team", "init", str(path), "--team", "acme"]
    argv += ["--member", "alice:director:members.manage,objectives.create"]
    argv += ["-m", "builder:engineer", "-m", "scout:scout:objectives.create", "-m", "zed"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    tokens = dict(line.split("\t") for line in out)
    assert list(tokens) == ["alice", "builder", "scout", "zed"]
    text = path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    team = load_team(path)
    assert team.name == "acme"
    for name, token in tokens.items():
        assert token not in text
        member = team.authenticate(token)
        assert member is not None
        assert member.name == name
    assert team.members[2].role == Role("scout", ("objectives.create",))
    assert team.members[3].role is None


def test_team_init_refuses_overwrite_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "team.toml"
    path.write_text("precious")
    assert main(["team", "init", str(path), "-m", "a"]) == 2
    assert "--force" in capsys.readouterr().err
    assert path.read_text() == "precious"
    assert main(["team", "init", str(path), "-m", "a", "--force"]) == 0
    assert load_team(path).members[0].name == "a"


def test_team_init_rejects_bad_members(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "team.toml"
    assert main(["team", "init", str(path), "-m", "a", "-m", "a"]) == 2
    assert "twice" in capsys.readouterr().err
    assert main(["team", "init", str(path), "-m", "no way"]) == 2
    assert not path.exists()


def test_team_init_refuses_a_permission_with_a_colon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``a:b:c:d`` was stored as permission "c:d"."""
    path = tmp_path / "team.toml"
    assert main(["team", "init", str(path), "--member", "a:b:c:d"]) == 2
    assert capsys.readouterr().err == (
        "codex-presence team: --member 'a:b:c:d': too many ':' — it is NAME:TITLE:PERMISSIONS,"
        " the permissions separated by commas (no permission holds a ':')\n"
    )
    assert not path.exists()


def test_team_init_warns_on_unknown_permissions_and_keeps_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "team.toml"
    argv = [
        "team",
        "init",
        str(path),
        "-m",
        "a:lead:members.manage,deploy",
        "-m",
        "b:x:objectives.create",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "codex-presence team: warning: --member a: permission 'deploy' is not one the roster"
        " knows (members.manage [admin], objectives.create [operator]); it is kept, and gives"
        " no privilege bucket",
        f"codex-presence team: wrote {path} (2 members, mode 0600). The tokens went to "
        "standard output (a name and its token a line), only now: keep them private; the file "
        "keeps their sha256.",
    ]
    assert load_team(path).members[0].role == Role("lead", ("members.manage", "deploy"))
    assert main(["team", "init", str(tmp_path / "one.toml"), "-m", "solo"]) == 0
    assert "(1 member, mode 0600)" in capsys.readouterr().err


def test_team_init_help_lists_the_permissions_and_their_buckets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["team", "init", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert re.search(r"^  members\.manage +\[admin\]$", out, re.MULTILINE), out
    assert re.search(r"^  objectives\.create +\[operator\]$", out, re.MULTILINE), out
