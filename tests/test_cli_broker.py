"""The ``broker``, ``roster`` commands as a user runs them: real processes, real HTTP."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from codex_presence.broker.team import Role, Team
from codex_presence.broker.team_file import render_team
from codex_presence.cli.broker import exposure_warning, is_loopback
from codex_presence.cli.main import main
from tests.support.broker_harness import (
    RunningBroker,
    broker_process,
    make_team,
    not_a_broker,
    reserved_port,
    running_broker,
    token_of,
)
from tests.support.waiting import WAIT, Lines, exits

CLI = [sys.executable, "-m", "codex_presence"]
TEAM = make_team("alice", "builder", "scout")


def test_broker_serves_and_stops_on_ctrl_c_with_a_stream_open(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [("alice", Role("director", ()), "cp_alice-token")]))
    with broker_process("--team", str(team)) as broker:
        proc, url = broker.proc, broker.url
        assert "(team acme, 1 member)" in broker.said()
        assert httpx.get(url + "/healthz").json()["status"] == "ok"
        headers = {"authorization": "Bearer cp_alice-token"}
        with (
            httpx.Client(base_url=url, timeout=10) as c,
            c.stream("GET", "/subscribe?name=alice", headers=headers) as stream,
        ):
            lines = stream.iter_lines()
            assert next(lines).startswith("retry:")
            proc.send_signal(signal.SIGINT)
            for _ in range(1000):  # the stream ends instead of hanging shutdown
                try:
                    next(lines)
                except StopIteration:
                    break
        assert exits(proc, what="the broker", seen=broker.said) == 0


def test_a_host_that_cannot_be_bound_is_an_error_without_a_word_of_listening(
    tmp_path: Path,
) -> None:
    """``--host 999.1.1.1`` used to say "listening on 999.1.1.1, reachable from other
    machines" before it failed to bind."""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [("alice", None, "cp_alice-token")]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    done = subprocess.run(
        [*CLI, "broker", "--team", str(team), "--host", "999.1.1.1", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 1
    assert "listening" not in done.stderr
    assert done.stderr.startswith("codex-presence broker: cannot bind 999.1.1.1:0: ")
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'team = "x"\n', "no members"),
        (b'team = "x\xff"\n', "not valid TOML: the file is not UTF-8 text"),
        (None, "cannot read the team file: Is a directory"),
    ],
    ids=["no members", "not UTF-8", "a directory"],
)
def test_broker_refuses_a_bad_team_file(tmp_path: Path, content: bytes | None, says: str) -> None:
    team = tmp_path / "team.toml"
    if content is None:
        team.mkdir()
    else:
        team.write_bytes(content)
    result = subprocess.run(
        [*CLI, "broker", "--port", "0", "--team", str(team)],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 2
    assert says in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("ttl", ["0.5", "0", "-3", "nan"])
def test_broker_refuses_a_ttl_under_a_second(tmp_path: Path, ttl: str) -> None:
    """Runners heartbeat at a third of the TTL: below a second they could not keep up."""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [("alice", None, token_of("alice"))]))
    result = subprocess.run(
        [*CLI, "broker", "--port", "0", "--team", str(team), "--activity-ttl", ttl],
        capture_output=True,
        text=True,
        timeout=WAIT,  # before, the broker took it and ran: this fails rather than hangs
    )
    assert result.returncode == 2
    assert "--activity-ttl must be at least 1 s" in result.stderr
    assert "runners heartbeat at a third of it" in result.stderr


def test_a_token_file_that_is_not_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "token"
    token.write_bytes(b"\xff\xfecp_x")
    token.chmod(0o600)
    code, _, err = run_roster(
        monkeypatch, capsys, "--broker", "http://127.0.0.1:9", "--token-file", str(token)
    )
    assert code == 2
    assert f"token file {token} is not text (UTF-8)" in err


def test_broker_without_team_makes_a_dev_team_and_says_where_the_token_is(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path)}
    with broker_process(env=env) as broker:
        url, said = broker.url, broker.said()  # said before "listening on"
        token_path = tmp_path / "codex-presence" / "dev-token"
        assert f"your token is in {token_path}" in said
        assert stat.S_IMODE(token_path.stat().st_mode) == 0o600
        token = token_path.read_text().strip()
        assert token not in said
        response = httpx.get(url + "/whoami", headers={"authorization": f"Bearer {token}"})
        assert response.status_code == 200
        assert response.json()["team"] == "dev"


def test_a_loopback_broker_refuses_a_rebinding_host(tmp_path: Path) -> None:
    """Before: the broker answered any ``Host``, so a page on ``evil.example`` resolved to
    127.0.0.1 (DNS rebinding) could read it as same-origin. Now a loopback broker answers
    its loopback names only, and the names ``--allowed-host`` adds (a proxy's)."""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [("alice", None, token_of("alice"))]))

    def status(url: str, host: str) -> httpx.Response:
        return httpx.get(url + "/healthz", headers={"host": host}, timeout=5)

    with broker_process("--team", str(team)) as broker:
        port = broker.port
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "127.0.0.1", "LOCALHOST"):
            assert status(broker.url, host).status_code == 200, host
        refused = status(broker.url, f"evil.example:{port}")
        assert refused.status_code == 421
        assert refused.json()["error"].startswith(
            "this broker does not serve the host named in the Host header ('evil.example')"
        )
        assert "--allowed-host" in refused.json()["error"]
        page = httpx.get(broker.url + "/", headers={"host": "evil.example"}, timeout=5)
        assert page.status_code == 421  # the page and its sign-in too
    with broker_process("--team", str(team), "--allowed-host", "presence.example.com") as broker:
        assert status(broker.url, "presence.example.com").status_code == 200
        assert status(broker.url, "127.0.0.1").status_code == 200
        assert status(broker.url, "evil.example").status_code == 421
    with broker_process("--team", str(team), "--allowed-host", "*") as broker:
        assert status(broker.url, "evil.example").status_code == 200


def test_which_hosts_a_broker_answers() -> None:
    from codex_presence.broker.hosts import allowed_hosts, host_of

    assert host_of("[::1]:8765") == "::1" and host_of("Example.COM:80") == "example.com"
    assert host_of("::1") == "::1" and host_of("localhost") == "localhost"
    assert allowed_hosts("127.0.0.1") == {"127.0.0.1"}  # and any loopback name (HostCheck)
    assert allowed_hosts("[::1]", ["presence.example.com:443"]) == {"::1", "presence.example.com"}
    assert allowed_hosts("0.0.0.0") is None  # reached by names it cannot know
    assert allowed_hosts("0.0.0.0", ["presence.example.com"]) == {"0.0.0.0", "presence.example.com"}
    assert allowed_hosts("127.0.0.1", ["*"]) is None


def test_loopback_detection() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com"):
        assert not is_loopback(host), host
        warning = exposure_warning(host)
        assert warning is not None
        assert "plain HTTP" in warning
    assert exposure_warning("127.0.0.1") is None


# -- roster --------------------------------------------------------------------------------


@pytest.fixture
def broker() -> Iterator[RunningBroker]:
    with running_broker(team=TEAM) as b:
        yield b


def run_roster(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    code = main(["roster", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_roster_prints_the_design_text(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CODEX_PRESENCE_TOKEN", token_of("alice"))
    monkeypatch.setenv("CODEX_PRESENCE_BROKER", broker.url)
    with (
        httpx.Client(base_url=broker.url, timeout=10) as c,
        c.stream("GET", "/subscribe?name=alice", headers=broker.auth("alice")) as s1,
        c.stream("GET", "/subscribe?name=builder", headers=broker.auth("builder")) as s2,
    ):
        # keep the iterators: a discarded one closes its connection
        lines1, lines2 = s1.iter_lines(), s2.iter_lines()
        next(lines1)
        next(lines2)
        c.post("/presence/activity", json={"state": "working"}, headers=broker.auth("builder"))
        code, out, _ = run_roster(monkeypatch, capsys)
    assert code == 0
    assert out == (
        "team acme roster:\n"
        "- alice (you) [director] [admin] connected=1\n"
        "- builder [engineer] connected=1\n"
        "- scout [scout] [operator] offline\n"
    )


def test_roster_json_is_the_raw_roster(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CODEX_PRESENCE_TOKEN", token_of("scout"))
    code, out, _ = run_roster(monkeypatch, capsys, "--broker", broker.url, "--json")
    assert code == 0
    assert out.strip() == httpx.get(broker.url + "/roster", headers=broker.auth("scout")).text


def test_roster_token_from_a_file_warns_when_others_can_read_it(
    broker: RunningBroker,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("CODEX_PRESENCE_TOKEN", raising=False)
    token_file = tmp_path / "token"
    token_file.write_text(token_of("builder") + "\n")
    token_file.chmod(0o644)
    code, out, err = run_roster(
        monkeypatch, capsys, "--broker", broker.url, "--token-file", str(token_file)
    )
    assert code == 0
    assert "- builder (you) [engineer] offline" in out
    assert "readable by group or others" in err
    assert token_of("builder") not in err
    token_file.chmod(0o600)
    code, out, err = run_roster(
        monkeypatch, capsys, "--broker", broker.url, "--token-file", str(token_file)
    )
    assert (code, err) == (0, "")


def test_roster_errors(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CODEX_PRESENCE_TOKEN", raising=False)
    code, _, err = run_roster(monkeypatch, capsys, "--broker", broker.url)
    assert code == 2
    assert "CODEX_PRESENCE_TOKEN" in err

    monkeypatch.setenv("CODEX_PRESENCE_TOKEN", "cp_wrong-token")
    code, _, err = run_roster(monkeypatch, capsys, "--broker", broker.url)
    assert code == 1
    assert "401" in err
    assert "cp_wrong-token" not in err

    monkeypatch.setenv("CODEX_PRESENCE_TOKEN", token_of("alice"))
    code, _, err = run_roster(monkeypatch, capsys, "--broker", broker.url, "--name", "builder")
    assert code == 2
    assert err == "codex-presence roster: the token is alice's, not builder's (--name)\n"

    code, _, err = run_roster(monkeypatch, capsys, "--broker", "http://127.0.0.1:9")
    assert code == 1
    assert "cannot reach" in err


def test_roster_activity_adds_state_and_how_long_and_watch_shows_since(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--activity`` adds the state and its age to the design's lines; ``--watch`` shows
    the age too (the broker's clock is set 3 min 5 s back: its reports are that old)."""
    with running_broker(team=TEAM, wall_clock=lambda: time.time() - 185) as broker:
        for name, state in (("builder", "working"), ("scout", "blocked")):
            response = httpx.post(
                broker.url + "/presence/activity", json={"state": state}, headers=broker.auth(name)
            )
            assert response.status_code == 204
        monkeypatch.setenv("CODEX_PRESENCE_TOKEN", token_of("alice"))
        monkeypatch.setenv("CODEX_PRESENCE_BROKER", broker.url)
        code, plain, _ = run_roster(monkeypatch, capsys)
        assert (code, plain) == (
            0,
            "team acme roster:\n"
            "- alice (you) [director] [admin] offline\n"
            "- builder [engineer] offline\n"
            "- scout [scout] [operator] offline\n",
        )
        code, out, _ = run_roster(monkeypatch, capsys, "--activity")
        assert (code, out) == (
            0,
            "team acme roster:\n"
            "- alice (you) [director] [admin] offline\n"
            "- builder [engineer] offline working 3m\n"
            "- scout [scout] [operator] offline blocked 3m\n",
        )
        env = {**os.environ, "CODEX_PRESENCE_TOKEN": token_of("alice")}
        with subprocess.Popen(
            [*CLI, "roster", "--watch", "--broker", broker.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        ) as proc:
            try:
                out_lines = Lines(proc.stdout)
                out_lines.until(r"^- builder \[engineer\] offline  . working · 3 min$")
                out_lines.until(
                    r"^- scout \[scout\] \[operator\] offline  \[!\] needs input · 3 min$"
                )
            finally:
                proc.kill()
                proc.wait(WAIT)


def test_roster_watch_redraws_live(broker: RunningBroker) -> None:
    env = {
        **os.environ,
        "CODEX_PRESENCE_TOKEN": token_of("alice"),
        "CODEX_PRESENCE_BROKER": broker.url,
    }
    with subprocess.Popen(
        [*CLI, "roster", "--watch", "--name", "alice"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        try:
            out = Lines(proc.stdout)
            out.until(r"^- alice \(you\) \[director\] \[admin\] connected=1$")
            with httpx.Client(base_url=broker.url, timeout=10) as c:
                post = c.post
                post(
                    "/presence/activity", json={"state": "working"}, headers=broker.auth("builder")
                )
                out.until(r"^- builder \[engineer\] offline  . working · \d+ s$")
                post(
                    "/presence/activity", json={"state": "blocked"}, headers=broker.auth("builder")
                )
                out.until(r"^- builder \[engineer\] offline  \[!\] needs input · \d+ s$")
                post("/presence/activity", json={"state": "idle"}, headers=broker.auth("builder"))
                out.until(r"^- builder \[engineer\] offline$")
            proc.send_signal(signal.SIGINT)
            assert exits(proc, what="roster --watch", seen=lambda: "".join(out.seen)) in (0, 130)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(WAIT)


@contextmanager
def watch_then_lose_the_broker(team: Team) -> Iterator[tuple[subprocess.Popen[str], Lines, int]]:
    """alice's ``roster --watch`` against a broker, which then goes away: yields the watch,
    its output (the "reconnecting" line already seen) and the port to bring a broker back
    on."""
    first_life = ExitStack()
    first = first_life.enter_context(running_broker(team=team))
    port = int(first.url.rsplit(":", 1)[1])
    with (
        first_life,
        subprocess.Popen(
            [*CLI, "roster", "--watch", "--broker", first.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "CODEX_PRESENCE_TOKEN": token_of("alice")},
        ) as proc,
    ):
        try:
            out = Lines(proc.stdout)
            out.until(r"^- alice \(you\) \[director\] \[admin\] connected=1$")
            first_life.close()  # the broker goes away
            out.until(r"^\(.*reconnecting in [0-9.]+ s\)$")
            assert proc.poll() is None
            yield proc, out, port
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(WAIT)


def test_roster_watch_rides_out_a_broker_restart() -> None:
    """The stream lost: the watch says so under the last roster and keeps trying; the
    broker back (empty, on the same port): the roster is live again."""
    team = make_team("alice", "builder")
    with (
        watch_then_lose_the_broker(team) as (proc, out, port),
        running_broker(team=team, port=port) as second,
    ):
        out.until(r"^- alice \(you\) \[director\] \[admin\] connected=1$")
        with httpx.Client(base_url=second.url, timeout=10) as c:
            c.post("/presence/activity", json={"state": "blocked"}, headers=second.auth("builder"))
        out.until(r"^- builder \[engineer\] offline  \[!\] needs input · \d+ s$")
        assert out.queue.get(timeout=WAIT) == "\n"  # the frame ends: no status line
        proc.send_signal(signal.SIGINT)
        assert exits(proc, what="roster --watch", seen=lambda: "".join(out.seen)) in (0, 130)


def test_roster_watch_ends_when_the_restarted_broker_refuses_the_token() -> None:
    with watch_then_lose_the_broker(make_team("alice")) as (proc, _, port):
        # back with a team that no longer has alice: her token is refused for good
        with running_broker(team=make_team("builder"), port=port):
            assert exits(proc, what="roster --watch") == 1
        assert proc.stderr is not None
        assert "refused the token (401)" in proc.stderr.read()


def test_roster_against_a_url_that_is_not_a_broker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CODEX_PRESENCE_TOKEN", token_of("alice"))
    with not_a_broker() as url:
        code, out, err = run_roster(monkeypatch, capsys, "--broker", url)
    assert code == 1
    assert out == ""
    assert "answered text/html, not a codex-presence broker's JSON" in err


def test_a_broker_url_without_http_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: "Request URL has an unsupported protocol 'localhost://'." (httpx's words)."""
    monkeypatch.setenv("CODEX_PRESENCE_TOKEN", token_of("alice"))
    with pytest.raises(SystemExit) as done:
        main(["roster", "--broker", "localhost:8765"])
    assert done.value.code == 2
    assert capsys.readouterr().err.endswith(
        "argument --broker: 'localhost:8765' is not a URL: a broker's URL starts with "
        "http:// or https:// (http://localhost:8765?)\n"
    )
    # A TLS address (port 443 or 8443, or a host name alone) gets https:// (before: http://).
    for address in ("presence.example.com:8443", "presence.example.com"):
        with pytest.raises(SystemExit):
            main(["roster", "--broker", address])
        assert f"(https://{address}?)" in capsys.readouterr().err
    monkeypatch.setenv("CODEX_PRESENCE_BROKER", "ftp://localhost:8765")
    assert main(["roster"]) == 2
    assert capsys.readouterr().err == (
        "codex-presence roster: CODEX_PRESENCE_BROKER: 'ftp://localhost:8765': a broker's "
        "URL starts with http:// or https://, not ftp://\n"
    )
    # Before: an ExceptionGroup traceback ending in "OverflowError: connect(): port must
    # be 0-65535" (urlsplit raises for such a port only when it is read).
    monkeypatch.setenv("CODEX_PRESENCE_BROKER", "http://127.0.0.1:99999")
    assert main(["roster"]) == 2
    assert capsys.readouterr().err == (
        "codex-presence roster: CODEX_PRESENCE_BROKER: 'http://127.0.0.1:99999' is not a "
        "URL: Port out of range 0-65535\n"
    )


def test_https_to_a_plain_http_broker_says_what_to_try(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: only OpenSSL's "[SSL: WRONG_VERSION_NUMBER] wrong version number"."""
    monkeypatch.setenv("CODEX_PRESENCE_TOKEN", token_of("alice"))
    tls = broker.url.replace("http://", "https://")
    code, out, err = run_roster(monkeypatch, capsys, "--broker", tls)
    assert (code, out) == (1, "")
    assert err.endswith(
        "(the broker speaks plain HTTP unless a TLS proxy is in front of it: http://?)\n"
    ), err


def test_a_url_that_answers_an_html_error_is_said_in_one_sentence(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: "GET /whoami: HTTP 404 <!DOCTYPE HTML> <html lang=…" (~300 characters of
    the page)."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    server.RequestHandlerClass.log_message = lambda *a: None  # type: ignore[method-assign]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("CODEX_PRESENCE_TOKEN", token_of("alice"))
    try:
        code, out, err = run_roster(monkeypatch, capsys, "--broker", url)
    finally:
        server.shutdown()
        server.server_close()
    assert (code, out) == (1, "")
    assert err == (
        f"codex-presence roster: GET /whoami: {url} answered HTTP 404 (text/html), not as a "
        "codex-presence broker does: is it the broker's URL?\n"
    )


def test_roster_watch_waits_for_a_broker_not_up_yet() -> None:
    """Before: exited 1 at once ("cannot reach"), though its help says only a refused token
    or Ctrl-C ends it."""
    team = make_team("alice")
    with reserved_port() as sock:  # bound, not listening: connections are refused
        port = sock.getsockname()[1]
        with subprocess.Popen(
            [*CLI, "roster", "--watch", "--broker", f"http://127.0.0.1:{port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "CODEX_PRESENCE_TOKEN": token_of("alice")},
        ) as proc:
            try:
                out = Lines(proc.stdout)
                out.until(r"^\(cannot reach the presence broker at .*; retrying in [0-9.]+ s\)$")
                assert proc.poll() is None
                with running_broker(team=team, sock=sock):
                    out.until(r"^- alice \(you\) \[director\] \[admin\] connected=1$")
                    proc.send_signal(signal.SIGINT)
                    assert exits(proc, what="roster --watch", seen=lambda: "".join(out.seen)) in (
                        0,
                        130,
                    )
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(WAIT)


def test_read_token_rules(tmp_path: Path) -> None:
    from codex_presence.client.auth import TokenError, read_token

    assert read_token(token_file=None, environ={"CODEX_PRESENCE_TOKEN": " cp_x \n"}) == "cp_x"
    path = tmp_path / "token"
    path.write_text("cp_from-file\n")
    path.chmod(0o600)
    # the file wins over the environment
    assert read_token(token_file=str(path), environ={"CODEX_PRESENCE_TOKEN": "cp_env"}) == (
        "cp_from-file"
    )
    for text, message in [("", "is empty"), ("cp_a b", "whitespace"), ("cp_ä", "non-ASCII")]:
        path.write_text(text)
        with pytest.raises(TokenError, match=message) as info:
            read_token(token_file=str(path), environ={})
        assert text not in str(info.value) or not text
    with pytest.raises(TokenError, match="cannot read"):
        read_token(token_file=str(tmp_path / "missing"), environ={})
    with pytest.raises(TokenError, match="no token"):
        read_token(token_file=None, environ={})


def test_an_environment_variable_for_one_command_never_breaks_another(tmp_path: Path) -> None:
    env = {**os.environ, "CODEX_PRESENCE_PORT": "not-a-port", "CODEX_PRESENCE_VERBOSE": "2"}
    ok = subprocess.run(
        [*CLI, "team", "init", str(tmp_path / "t.toml"), "--member", "a:eng"],
        capture_output=True,
        text=True,
        env={**env, "CODEX_PRESENCE_TEAM_NAME": "from-env"},  # nested commands read it too
        timeout=WAIT,
    )
    assert ok.returncode == 0, ok.stderr
    assert '\nteam = "from-env"\n' in (tmp_path / "t.toml").read_text()
    refused = subprocess.run(
        [*CLI, "broker", "--team", str(tmp_path / "t.toml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=WAIT,
    )
    assert refused.returncode == 2
    assert "CODEX_PRESENCE_PORT='not-a-port'" in refused.stderr


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://x:99999/", "Port out of range"),
        ("roster.example.com", "starts with http://"),
        ("ftp://x/", "not ftp://"),
        ("http:///roster", "names no host"),
    ],
)
def test_broker_refuses_a_public_url_that_is_none(tmp_path: Path, url: str, said: str) -> None:
    """The link a notification carries: one a reader cannot open is said at the start."""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [("alice", None, token_of("alice"))]))
    options = ["--notify", "json://127.0.0.1:9/", "--public-url", url]
    result = subprocess.run(
        [*CLI, "broker", "--port", "0", "--team", str(team), *options],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 2
    assert "--public-url: " in result.stderr and said in result.stderr, result.stderr


@pytest.mark.parametrize(("grace", "ttl"), [("-1", "30"), ("nan", "30"), ("31", "30")])
def test_broker_refuses_a_session_grace_out_of_range(tmp_path: Path, grace: str, ttl: str) -> None:
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [("alice", None, token_of("alice"))]))
    options = ["--session-grace", grace, "--activity-ttl", ttl]
    result = subprocess.run(
        [*CLI, "broker", "--port", "0", "--team", str(team), *options],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 2
    assert "--session-grace must be 0 or more, and at most --activity-ttl" in result.stderr
    # the values said (before: neither, so "at most --activity-ttl" left the TTL to guess)
    assert f"(got {grace}; --activity-ttl is {ttl})" in result.stderr


def test_the_session_grace_is_the_brokers_option(tmp_path: Path) -> None:
    """``--session-grace 5``: a session whose subscription ends lapses after five seconds,
    not the default 3 s (issue 23). Decided by the grace's own timer (not before 4.5 s) and
    by cause (the TTL is 600 s: only the grace can end it), never by an upper bound on how
    long the lapse took, which a loaded machine stretches."""
    from codex_presence._wire import SESSION_GRACE
    from tests.support.waiting import eventually

    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [("alice", None, token_of("alice"))]))
    auth = {"authorization": f"Bearer {token_of('alice')}"}
    grace = 5.0
    args = ("--team", str(team), "--session-grace", str(grace), "--activity-ttl", "600")
    with broker_process(*args) as broker:
        with (
            httpx.Client(base_url=broker.url, timeout=httpx.Timeout(5, read=60)) as client,
            client.stream(
                "GET", "/subscribe", params={"name": "alice", "session": "run-1"}, headers=auth
            ) as stream,
        ):
            assert stream.status_code == 200
            body = {"state": "working", "session": "run-1"}
            assert client.post("/presence/activity", json=body, headers=auth).status_code == 204
        ended = time.monotonic()

        def idle() -> bool:
            (alice,) = httpx.get(broker.url + "/roster", headers=auth, timeout=5).json()
            return "activity" not in alice

        eventually(idle, 60)
        assert time.monotonic() - ended >= grace * 0.9 > SESSION_GRACE


def test_the_default_grace_gives_way_to_a_shorter_ttl(tmp_path: Path) -> None:
    """``--activity-ttl 2`` alone is a valid broker (before: refused, by a grace of 3 s the
    person never set); a session's state then lapses by the TTL's length at most."""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [("alice", None, token_of("alice"))]))
    auth = {"authorization": f"Bearer {token_of('alice')}"}
    with broker_process("--team", str(team), "--activity-ttl", "2") as broker:
        who = httpx.get(broker.url + "/whoami", headers=auth, timeout=60)
        assert who.status_code == 200 and who.json()["activityTtlMs"] == 2000, who.text
    # An explicit contradiction stays an error naming both.
    result = subprocess.run(
        [
            *CLI,
            "broker",
            "--port",
            "0",
            "--team",
            str(team),
            "--activity-ttl",
            "2",
            "--session-grace",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "(got 3; --activity-ttl is 2)" in result.stderr, result.stderr


def test_notify_after_without_a_notify_target_is_a_usage_error(tmp_path: Path) -> None:
    """Before: accepted without a word, though it changed nothing."""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [("alice", None, token_of("alice"))]))
    result = subprocess.run(
        [*CLI, "broker", "--port", "0", "--team", str(team), "--notify-after", "5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--notify-after applies to --notify targets, and none is given" in result.stderr


@pytest.mark.parametrize("given", ["--notify", "CODEX_PRESENCE_NOTIFY"])
def test_a_notify_url_on_the_command_line_draws_a_warning(tmp_path: Path, given: str) -> None:
    """An apprise URL carries its service's secret (a token, a webhook's path), and the
    process list shows every argument to anyone on the machine: one line says so, and
    where the URL can go instead; from the variable, nothing is said."""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [("alice", None, token_of("alice"))]))
    url = "json://127.0.0.1:9/hooks/s3cret-path"
    options = ["--notify", url] if given == "--notify" else []
    env = {"CODEX_PRESENCE_NOTIFY": url} if given != "--notify" else {}
    with broker_process("--team", str(team), *options, env=env) as broker:
        said = broker.said()
    warned = [line for line in said.splitlines() if "show in the process list" in line]
    if given == "--notify":
        assert len(warned) == 1, said
        assert "CODEX_PRESENCE_NOTIFY" in warned[0] and "[[notify]]" in warned[0]
    else:
        assert warned == [], said
    assert "s3cret-path" not in said


def test_roster_watch_reads_the_roster_by_a_conditional_get() -> None:
    """``roster --watch``'s stream (:class:`~codex_presence.client.stream.RosterStream`
    with a roster to show, in this process, its requests logged) is a light one: no
    roster on it, and ``GET /roster`` read with the ETag of the roster read last; a
    roster unchanged since is a 304 with no body. The broker's wall clock stands still
    (``lastSeen`` ticks on every subscribe), and the stream reconnects after a second of
    silence (a short read timeout), so that a reconnect leaves the roster as it was;
    builder's report in between is carried by the stream and shown."""
    import anyio

    from codex_presence.client.stream import RosterStream, RosterView

    reads: list[tuple[int, str | None]] = []
    """Each GET /roster: its status and the If-None-Match it carried."""
    views: list[dict[str, str]] = []
    frozen = time.time()
    with running_broker(team=TEAM, wall_clock=lambda: frozen) as broker:
        httpx.post(  # seen (createdAt, lastSeen) before the first read
            broker.url + "/presence/activity",
            json={"state": "idle"},
            headers=broker.auth("builder"),
        ).raise_for_status()

        async def after(response: httpx.Response) -> None:
            if response.request.url.path == "/roster":
                reads.append((response.status_code, response.request.headers.get("if-none-match")))

        def on_roster(view: RosterView) -> None:
            views.append({n: str(p.get("activity", "idle")) for n, p in view.members.items()})

        async def main_() -> None:
            async with (
                httpx.AsyncClient(
                    base_url=broker.url,
                    headers=broker.auth("alice"),
                    timeout=10,
                    event_hooks={"response": [after]},
                ) as client,
                anyio.create_task_group() as tg,
            ):
                stream = RosterStream(client, "alice", on_roster=on_roster, read_timeout=1.0)
                tg.start_soon(stream.run)
                with anyio.fail_after(60):
                    while not views:
                        await anyio.sleep(0.02)
                    response = await client.post(
                        "/presence/activity",
                        json={"state": "blocked"},
                        headers=broker.auth("builder"),
                    )
                    assert response.status_code == 204
                    while not (
                        views[-1].get("builder") == "blocked" and (304, reads[-1][1]) == reads[-1]
                    ):
                        await anyio.sleep(0.02)
                tg.cancel_scope.cancel()

        try:
            anyio.run(main_)
        except BaseException as exc:  # what was seen, for the failure's message
            raise AssertionError(f"reads {reads}, views {views}") from exc

    assert reads[0] == (200, None), reads  # the first read has no ETag to send
    assert all(tag for _, tag in reads[1:]), f"every later read sends its ETag: {reads}"
    assert views[-1] == {"alice": "idle", "builder": "blocked", "scout": "idle"}, views
