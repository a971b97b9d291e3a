"""``codex-presence team init`` run as a person runs it: a real process, its standard output
redirected to a file or a terminal (a pseudo-terminal)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.broker_harness import broker_process
from tests.support.waiting import eventually


def test_team_init_says_where_the_tokens_went(tmp_path: Path) -> None:
    """Before: ``team init … > tokens.tsv`` said "The tokens above are shown only now",
    though nothing was shown on screen. On a terminal, the tokens are above."""
    import os
    import pty
    import subprocess
    import sys

    command = [sys.executable, "-m", "codex_presence", "team", "init"]
    with (tmp_path / "tokens.tsv").open("w") as redirected:
        result = subprocess.run(
            [*command, str(tmp_path / "a.toml"), "-m", "alice"],
            stdout=redirected,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert result.returncode == 0
    assert "above" not in result.stderr
    assert "The tokens went to standard output" in result.stderr
    assert (tmp_path / "tokens.tsv").read_text().startswith("alice\tcp_")
    leader, follower = pty.openpty()
    try:
        result = subprocess.run(
            [*command, str(tmp_path / "b.toml"), "-m", "alice"],
            stdout=follower,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert result.returncode == 0
    assert "The tokens above are shown only now; the file keeps their sha256." in result.stderr


# -- add, remove, rotate, and a running broker that follows ----------------------------------


def team(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "codex_presence", "team", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def token_printed(result: subprocess.CompletedProcess[str], name: str) -> str:
    assert result.returncode == 0, result.stderr
    printed, token = result.stdout.rstrip("\n").split("\t")
    assert printed == name and token.startswith("cp_"), result.stdout
    assert token not in result.stderr
    return token


def whoami(url: str, token: str) -> int:
    return httpx.get(url + "/whoami", headers=bearer(token), timeout=60).status_code


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_a_running_broker_follows_team_add_rotate_and_remove(tmp_path: Path) -> None:
    """Before: ``team`` had only ``init`` (``--force`` replaced every token) and the broker
    read its team file once. Now a member added, a token rotated and a member removed take
    effect in the running broker: the new token signs in, the old one gets 401, and the
    removed member's open stream ends."""
    path = str(tmp_path / "team.toml")
    made = team("init", path, "--team", "acme", "-m", "alice:director", "-m", "builder")
    assert made.returncode == 0, made.stderr
    tokens = dict(line.split("\t") for line in made.stdout.splitlines())
    with broker_process("--team", path) as broker:
        carol = token_printed(team("add", path, "carol:engineer:objectives.create"), "carol")
        eventually(lambda: whoami(broker.url, carol) == 200, 60, "carol's new token counted")
        assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
        roster = httpx.get(broker.url + "/roster", headers=bearer(carol), timeout=60).json()
        assert [m["name"] for m in roster] == ["alice", "builder", "carol"]
        assert roster[2]["role"] == {"title": "engineer", "permissions": ["objectives.create"]}

        alice = token_printed(team("rotate", path, "alice"), "alice")
        eventually(lambda: whoami(broker.url, tokens["alice"]) == 401, 60, "the old token refused")
        assert whoami(broker.url, alice) == 200

        with httpx.Client(base_url=broker.url, timeout=httpx.Timeout(60)) as client:
            params = {"name": "builder"}
            with client.stream(
                "GET", "/subscribe", params=params, headers=bearer(tokens["builder"])
            ) as stream:
                assert stream.status_code == 200
                lines = stream.iter_lines()
                assert next(lines).startswith("retry:")
                removed = team("remove", path, "builder")
                assert removed.returncode == 0 and removed.stdout == "", removed.stderr
                rest = list(lines)  # the stream ends: read to its end, or time out (60 s)
        assert not any("keepalive" in line for line in rest[-1:]), rest
        assert whoami(broker.url, tokens["builder"]) == 401
        roster = httpx.get(broker.url + "/roster", headers=bearer(carol), timeout=60).json()
        assert [m["name"] for m in roster] == ["alice", "carol"]
        broker.stderr.until("team file .* read again", 60)


def test_a_rotated_token_ends_what_it_opened(tmp_path: Path) -> None:
    """A token is rotated because it may have leaked: what was opened with its old value
    ends with it, a stream that sends the token and a page signed in with it (its cookie
    and key). Before: a page signed in with the old token stayed signed in, its stream
    open, for the sign-in's twelve hours. A session signed in with the new token, and
    another member's, go on."""
    from codex_presence.broker.web import COOKIE_NAME, KEY_HEADER
    from tests.support.shared_brokers import Stream

    path = str(tmp_path / "team.toml")
    made = team("init", path, "--team", "acme", "-m", "alice", "-m", "builder")
    assert made.returncode == 0, made.stderr
    tokens = dict(line.split("\t") for line in made.stdout.splitlines())

    def signed_in(url: str, token: str) -> dict[str, str]:
        answer = httpx.post(url + "/session", data={"token": token}, timeout=60)
        assert answer.status_code == 200, answer.text
        return {
            "cookie": f"{COOKIE_NAME}={answer.cookies[COOKIE_NAME]}",
            KEY_HEADER: answer.json()["key"],
        }

    def whoami_as(url: str, headers: dict[str, str]) -> int:
        return httpx.get(url + "/whoami", headers=headers, timeout=60).status_code

    with broker_process("--team", path) as broker:
        page = signed_in(broker.url, tokens["alice"])
        others = signed_in(broker.url, tokens["builder"])
        by_token = Stream(broker.url, "alice", bearer(tokens["alice"]))
        by_page = Stream(broker.url, "alice", page)
        builders = Stream(broker.url, "builder", others)
        assert by_token.status == by_page.status == builders.status == 200

        alice = token_printed(team("rotate", path, "alice"), "alice")
        assert by_token.ended.wait(60), "the stream of the old token did not end"
        assert by_page.ended.wait(60), "the page signed in with the old token kept its stream"
        assert whoami_as(broker.url, page) == 401
        assert whoami(broker.url, tokens["alice"]) == 401
        assert whoami_as(broker.url, signed_in(broker.url, alice)) == 200
        assert whoami_as(broker.url, others) == 200
        assert not builders.ended.is_set()


def test_sighup_reads_the_team_file_again(tmp_path: Path) -> None:
    """A change the poll cannot see (the same inode, size and modification time) is read
    at SIGHUP, what ``systemctl reload`` sends. Before, SIGHUP ended the broker."""
    path = tmp_path / "team.toml"
    made = team("init", str(path), "--team", "acme", "-m", "alice")
    old = made.stdout.split("\t")[1].strip()
    spare = tmp_path / "spare.toml"
    spare.write_bytes(path.read_bytes())
    spare.chmod(0o600)
    new = token_printed(team("rotate", str(spare), "alice"), "alice")
    with broker_process("--team", str(path)) as broker:
        before = path.stat()
        assert len(spare.read_bytes()) == before.st_size
        with path.open("r+b") as f:  # in place: the inode, the size, the time kept
            f.write(spare.read_bytes())
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        broker.proc.send_signal(signal.SIGHUP)
        eventually(lambda: whoami(broker.url, new) == 200, 60, "the token rotated by hand")
        assert whoami(broker.url, old) == 401
        assert broker.proc.poll() is None


def test_a_broken_team_file_is_not_applied(tmp_path: Path) -> None:
    """A half-edited file never signs everyone out: the broker says why and keeps its team."""
    path = tmp_path / "team.toml"
    made = team("init", str(path), "--team", "acme", "-m", "alice")
    token = made.stdout.split("\t")[1].strip()
    with broker_process("--team", str(path)) as broker:
        path.write_text("team = \n")
        broker.stderr.until("team file not applied, the broker keeps its team", 60)
        assert whoami(broker.url, token) == 200


def test_team_edits_refuse_what_would_break_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "team.toml")
    assert team("init", path, "--team", "acme", "-m", "alice", "-m", "bob").returncode == 0
    with open(path, "a") as f:
        f.write('\n[[notify]]\nurl = "json://127.0.0.1:9/"\nmembers = ["bob"]\n')
    for args, said in [
        (("add", path, "alice"), "'alice' is a member already"),
        (("rotate", path, "carol"), "no member 'carol' (the members: alice, bob)"),
        (("remove", path, "bob"), "names 'bob', not a team member"),
        (("add", str(tmp_path / "none.toml"), "x"), "no such team file"),
    ]:
        result = team(*args)
        assert result.returncode == 2 and said in result.stderr, (args, result.stderr)
        assert result.stdout == ""
    assert team("remove", path, "alice").returncode == 0
    assert "[[notify]]" in Path(path).read_text()  # kept
    assert team("remove", path, "bob").returncode == 2  # the last member, and named


def test_brokers_sharing_redis_follow_team_add_and_remove(tmp_path: Path, redis_url: str) -> None:
    """Before: with ``--redis``, a member added or removed needed a restart of every broker
    ("members were added or removed: brokers sharing Redis take a new member list at a
    restart"). Now two brokers reading one team file each follow it: the member added
    shows on both rosters (offline) and reports through either; the member removed leaves
    both rosters, their stream ends and their token stops working; the two agree."""
    from tests.support.shared_brokers import Stream

    path = str(tmp_path / "team.toml")
    made = team("init", path, "--team", "acme", "-m", "alice:director", "-m", "builder")
    assert made.returncode == 0, made.stderr
    tokens = dict(line.split("\t") for line in made.stdout.splitlines())

    def roster(url: str) -> dict[str, dict[str, object]]:
        response = httpx.get(url + "/roster", headers=bearer(tokens["alice"]), timeout=60)
        assert response.status_code == 200, response.text
        return {m["name"]: m for m in response.json()}

    def shown(url: str) -> list[tuple[str, object, object]]:
        return [(n, m["connected"], m.get("activity")) for n, m in roster(url).items()]

    with (
        broker_process("--team", path, redis=redis_url) as a,
        broker_process("--team", path, redis=redis_url) as b,
    ):
        on_b = Stream(b.url, "builder", bearer(tokens["builder"]))
        report = {"state": "working"}
        posted = httpx.post(
            a.url + "/presence/activity", json=report, headers=bearer(tokens["builder"]), timeout=60
        )
        assert posted.status_code == 204, posted.text
        want = [("alice", 0, None), ("builder", 1, "working")]
        for broker in (a, b):
            eventually(lambda broker=broker: shown(broker.url) == want, 60, "builder on both")

        carol = token_printed(team("add", path, "carol:engineer"), "carol")
        want.append(("carol", 0, None))
        for broker in (a, b):  # on both rosters, offline, before carol says anything
            eventually(lambda broker=broker: shown(broker.url) == want, 60, "carol on both")
        posted = httpx.post(
            a.url + "/presence/activity",
            json={"state": "blocked"},
            headers=bearer(carol),
            timeout=60,
        )
        assert posted.status_code == 204, posted.text
        on_carol = Stream(b.url, "carol", bearer(carol))
        want[2] = ("carol", 1, "blocked")
        for broker in (a, b):
            eventually(lambda broker=broker: shown(broker.url) == want, 60, "carol's report")
        assert on_carol.status == 200

        def carols_history(url: str) -> object:
            """carol's history as ``url`` reads it: the states written (by either broker)."""
            response = httpx.get(
                url + "/history?member=carol", headers=bearer(tokens["alice"]), timeout=60
            )
            if response.status_code != 200:
                return response.status_code, response.text
            return [s["state"] for s in response.json()["intervals"]]

        for broker in (a, b):  # a member added has a history on both, whoever wrote it
            eventually(
                lambda broker=broker: "blocked" in (carols_history(broker.url) or ()),
                60,
                "carol's history",
                seen=lambda broker=broker: carols_history(broker.url),
            )

        removed = team("remove", path, "builder")
        assert removed.returncode == 0, removed.stderr
        assert on_b.ended.wait(60), "builder's stream on b did not end"
        want.pop(1)
        for broker in (a, b):
            eventually(lambda broker=broker: shown(broker.url) == want, 60, "builder gone")
            assert whoami(broker.url, tokens["builder"]) == 401
            assert whoami(broker.url, carol) == 200
        assert not on_carol.ended.is_set()
        eventually(lambda: roster(a.url) == roster(b.url), 60, "the two brokers agree")
        for broker in (a, b):
            broker.stderr.until("team file .* read again: 2 member", 60)
