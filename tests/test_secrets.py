"""Secrets: a member token never shows up where others can read it — argv (``ps``), logs
at the most verbose level, ``--log-file``, recordings, error messages — and the places
where it could be exposed draw a warning (a token file others can read; a broker bound
beyond loopback, which speaks plain HTTP).

Each run below is searched, after the fact, for the token in every output it produced.
"""

from __future__ import annotations

import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codex_presence.broker.team_file import render_team
from tests.support.broker_harness import broker_process, make_team, running_broker, token_of
from tests.support.waiting import WAIT, eventually
from tests.support.wrap_harness import WrapProcess, is_note, is_request, wrap_env

PY = sys.executable
SECRET = token_of("alice")


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with open(task / "children") as f:
            found += [int(p) for p in f.read().split()]
    return found


def read_if_there(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def the_wrapped_child(wrap: int) -> int:
    """The command wrap runs: the only child of its watchdog, wrap's only child."""
    (watchdog,) = children(wrap)
    (child,) = children(watchdog)
    return child


def cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def everything_it_wrote(wrap: WrapProcess, *files: Path) -> dict[str, bytes]:
    outputs = {"stderr": bytes(wrap.stderr), "stdout": bytes(wrap.stdout)}
    for path in files:
        outputs[str(path)] = path.read_bytes() if path.exists() else b""
    return outputs


def test_a_session_at_full_verbosity_leaks_the_token_nowhere(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    token_file.chmod(0o600)
    log, record = tmp_path / "wrap.log", tmp_path / "session.jsonl"
    with running_broker(team=make_team("alice", "bob")) as broker:
        options = ["-vv", "--broker", broker.url, "--token-file", str(token_file)]
        with (
            WrapProcess([*options, "--log-file", str(log), "--record", str(record)]) as logged,
            WrapProcess(options) as verbose,  # the same, logging on stderr
        ):
            argv = {"wrap": cmdline(logged.proc.pid), "wrap2": cmdline(verbose.proc.pid)}
            for wrap in (logged, verbose):

                def said(w: WrapProcess = wrap) -> bytes:
                    return read_if_there(log) if w is logged else bytes(w.stderr)

                # The broker link attaches once loaded (the child starts first): a turn
                # over before that would be reported as its outcome (idle), not at all.
                eventually(lambda: b"online" in said())
                wrap.start_turn(1, approval=True, deltas=3)
                request = wrap.wait_for(is_request("item/commandExecution/requestApproval"))
                # A report made, and logged, while the turn waits: on a loaded machine the
                # turn could otherwise end before any report came back, and none be logged.
                eventually(lambda: b"reported blocked" in said())
                for child in (*children(wrap.proc.pid), the_wrapped_child(wrap.proc.pid)):
                    argv[f"child {child}"] = cmdline(child)
                wrap.send({"id": request["id"], "result": {"decision": "accept"}})
                wrap.wait_for(is_note("turn/completed"))
                assert wrap.close() == 0
    assert len(argv) == 6  # both wraps, their watchdogs and their children were looked at
    outputs = {**everything_it_wrote(logged, log, record), "verbose stderr": verbose.stderr}
    assert b"reported " in outputs[str(log)]  # debug level was on
    assert b"reported " in verbose.stderr
    assert b"turn/completed" in outputs[str(record)]
    for where, data in {**argv, **outputs}.items():
        assert SECRET.encode() not in data, f"the token is in {where}"


@pytest.mark.parametrize(
    "case",
    ["refused", "no broker", "bad URL", "whitespace token"],
)
def test_error_paths_never_print_the_token(tmp_path: Path, case: str) -> None:
    secret = "cp_a-secret-that-is-not-a-member"
    env = {"CODEX_PRESENCE_TOKEN": secret}
    broker_url = "http://127.0.0.1:9"  # discard: nothing listens
    if case == "bad URL":
        broker_url = "ftp://127.0.0.1:9/"
    if case == "whitespace token":
        env = {"CODEX_PRESENCE_TOKEN": secret + " " + secret}
    said = re.compile(
        rb"refused|cannot report|whoami|whose token|whitespace|offline|ftp|Unsupported"
    )
    with running_broker(team=make_team("alice", "bob")) as broker:
        if case == "refused":
            broker_url = broker.url
        with WrapProcess(["-vv", "--broker", broker_url], env=env) as wrap:
            # Blocked until the failure is said: the link attaches once wrap has loaded,
            # which a loaded machine put after a timed turn's end (nothing left to report).
            wrap.start_turn(1, approval=True, deltas=3)
            request = wrap.wait_for(is_request("item/commandExecution/requestApproval"))
            eventually(lambda: said.search(wrap.stderr), 60, "the failure said")
            wrap.send({"id": request["id"], "result": {"decision": "accept"}})
            wrap.wait_for(is_note("turn/completed"))
            assert wrap.close() == 0
    log = bytes(wrap.stderr)
    assert secret.encode() not in log
    assert secret.encode() not in wrap.stdout


def test_the_child_does_not_inherit_the_token() -> None:
    # codex, and every command its agent runs, would otherwise read the member's token.
    with WrapProcess(["--broker", "http://127.0.0.1:9"], env={"CODEX_PRESENCE_TOKEN": SECRET}) as w:
        w.start_turn(1, deltas=1)
        w.wait_for(is_note("turn/completed"))
        child_env = environ(the_wrapped_child(w.proc.pid))
        assert w.close() == 0
    assert SECRET.encode() not in child_env


READS_ITS_ELDERS_ENVIRONMENTS = r"""
import os, sys
def parent(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])
pid, found = os.getpid(), []
for _ in range(2):  # its parent (the watchdog), then that one's (wrap)
    pid = parent(pid)
    with open(f"/proc/{pid}/environ", "rb") as f:
        found.append(f.read())
print(len(found), "LEAK" if any(sys.argv[1].encode() in e for e in found) else "clean")
"""


def test_the_token_cannot_be_read_from_wraps_original_environment() -> None:
    """``os.environ.pop`` leaves the token in the process's original environment block,
    which ``/proc/<pid>/environ`` shows to every process of the same user: the child reads
    its parent's (the watchdog's) and its grandparent's (wrap's). Both are blanked."""
    proc = subprocess.run(
        [
            PY,
            "-m",
            "codex_presence",
            "wrap",
            "--quiet",
            "--",
            PY,
            "-c",
            READS_ITS_ELDERS_ENVIRONMENTS,
            SECRET,
        ],
        env=wrap_env({"CODEX_PRESENCE_TOKEN": SECRET}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"2 clean\n", b"")


def test_a_token_file_others_can_read_draws_a_warning(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    for mode, warned in ((0o644, True), (0o640, True), (0o600, False)):
        token_file.chmod(mode)
        with WrapProcess(["--broker", "http://127.0.0.1:9", "--token-file", str(token_file)]) as w:
            w.start_turn(1, deltas=1)
            w.wait_for(is_note("turn/completed"))
            assert w.close() == 0
        assert (b"readable by group or others" in w.stderr) is warned, (oct(mode), w.stderr)
        assert SECRET.encode() not in w.stderr


def _team_file(tmp_path: Path) -> str:
    team = tmp_path / "team.toml"
    if not team.exists():
        team.write_text(render_team("acme", [("alice", None, SECRET)]))
    return str(team)


def _listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket listening on ``port`` (from /proc/net/tcp)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_the_broker_binds_loopback_by_default_and_its_debug_log_has_no_token(
    tmp_path: Path,
) -> None:
    import httpx

    with broker_process("--team", _team_file(tmp_path), "-vv") as broker:
        said = broker.said()
        match = re.search(r"http://(127\.0\.0\.1):(\d+)", said)
        assert match, said
        port = int(match.group(2))
        assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, and nothing else
        assert "reachable from other machines" not in said
        url = f"http://127.0.0.1:{port}"
        headers = {"authorization": f"Bearer {SECRET}"}
        assert httpx.get(url + "/roster", headers=headers).status_code == 200
        wrong = {"authorization": f"Bearer {SECRET}x"}
        assert httpx.get(url + "/roster", headers=wrong).status_code == 401
        with httpx.stream("GET", url + "/subscribe?name=alice", headers=headers) as stream:
            assert next(stream.iter_lines()).startswith("retry:")
        form = {"content-type": "application/x-www-form-urlencoded"}
        signed_in = httpx.post(url + "/session", content=f"token={SECRET}", headers=form)
        key = signed_in.json()["key"]  # a web session's key, as the page sends it
        cookies = {"codex_presence_session": signed_in.cookies["codex_presence_session"]}
        with httpx.stream(
            "GET", f"{url}/subscribe?name=alice&key={key}", cookies=cookies
        ) as stream:
            assert next(stream.iter_lines()).startswith("retry:")
        time.sleep(0.3)
        broker.proc.terminate()
        log = broker.stderr.rest().encode()
    assert b"alice subscribed" in log  # debug logging was on
    assert b"GET /subscribe?name=alice&key=\xe2\x80\xa6 HTTP/1.1" in log  # -vv: access log
    assert SECRET.encode() not in log
    assert key.encode() not in log


def test_a_broker_exposed_without_tls_warns(tmp_path: Path) -> None:
    with broker_process("--team", _team_file(tmp_path), "--host", "0.0.0.0") as broker:
        said = broker.said()
        assert "reachable from other machines, over plain HTTP" in said
        assert "TLS" in said


def test_the_recording_and_the_log_file_are_created_private(tmp_path: Path) -> None:
    """A recording holds the whole session, and a log says what it did: both are created
    0600 (whatever the umask), and an existing file others could read loses those bits."""
    record, log = tmp_path / "session.jsonl", tmp_path / "wrap.log"
    old_record = tmp_path / "old.jsonl"
    old_record.write_text("")
    old_record.chmod(0o644)
    for target in (record, old_record):
        proc = subprocess.run(
            [
                PY,
                "-m",
                "codex_presence",
                "wrap",
                "--record",
                str(target),
                "--log-file",
                str(log),
                "--",
                PY,
                "-c",
                "print('{\"id\":1}')",
            ],
            env=wrap_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert target.read_bytes().startswith(b'{"t":')  # written to, not just created
    for path in (record, old_record, log):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


@pytest.mark.parametrize("command", ["roster", "notify list", "wrap"])
def test_a_password_in_the_broker_url_is_never_printed(tmp_path: Path, command: str) -> None:
    """``--broker http://user:PASSWORD@host`` came back in the roster's and ``notify list``'s
    errors and the runners' logs: every client shows the URL with the password masked."""
    with running_broker(team=make_team("alice")) as broker:
        url = broker.url.replace("http://", "http://me:s3cret-pass@")
        env = {"CODEX_PRESENCE_TOKEN": "cp_a-token-of-nobody-on-the-team"}
        if command == "wrap":
            with WrapProcess(["--broker", url], env=env) as wrap:
                eventually(lambda: b"offline" in wrap.stderr, what="the refusal said")
                assert wrap.close() == 0
            said = bytes(wrap.stderr).decode()
        else:
            proc = subprocess.run(
                [PY, "-m", "codex_presence", *command.split(), "--broker", url],
                env=wrap_env(env),
                capture_output=True,
                text=True,
                timeout=WAIT,
                check=False,
            )
            assert proc.returncode != 0, proc
            said = proc.stdout + proc.stderr
    assert "me:***@127.0.0.1" in said, said  # named, as the failure's place
    assert "s3cret-pass" not in said, said
