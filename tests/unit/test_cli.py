"""The command line's own rules (issue 15): no abbreviations, a subcommand's mistakes told
with its own usage, one list of the commands in the help."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from codex_presence.cli.main import _COMMANDS, main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(done.value.code or 0), out, err


def test_an_abbreviation_is_not_taken_for_a_longer_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``roster --token cp_x`` read the token from a file named cp_x (--token-file)."""
    code, _, err = run(capsys, "roster", "--token", "cp_x")
    assert code == 2
    assert err.startswith("usage: codex-presence roster ")
    assert err.endswith("codex-presence roster: error: unrecognized arguments: --token cp_x\n")
    code, _, err = run(capsys, "broker", "--red", "redis://x")  # not --redis, --redis-prefix
    assert code == 2 and "unrecognized arguments: --red redis://x" in err
    code, out, _ = run(capsys, "--vers")  # not --version
    assert (code, out) == (2, "")


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["replay", "--bogus", "file.jsonl"], "usage: codex-presence replay "),
        (["wrap", "--bogus", "--", "cat"], "usage: codex-presence wrap "),
        (["team", "init", "t.toml", "-m", "a", "--bogus"], "usage: codex-presence team init "),
        (["demo", "--fast"], "usage: codex-presence demo "),
    ],
)
def test_an_unknown_option_is_told_with_the_subcommands_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], usage: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith(usage), err
    prog = usage.removeprefix("usage: ").rstrip()
    assert err.splitlines()[-1].startswith(f"{prog}: error: unrecognized arguments: ")


def test_the_help_lists_each_command_once(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    listed = re.findall(r"^  ([a-z]+) +\S", out, re.MULTILINE)
    assert listed == list(_COMMANDS)  # each once, in one order
    for name in _COMMANDS:
        assert len(re.findall(rf"^\s+{name}\b", out, re.MULTILINE)) == 1, name


@pytest.mark.parametrize(
    "argv",
    [
        ["roster", "--notify", "json://user:PASSWORD@example.com/x"],
        ["broker", "--port", "redis://:PASSWORD@example.com"],
        ["roster", "--broker", "http://x", "https://u:PASSWORD@example.com/?password=PASSWORD"],
        ["roster", "--extra", "cp_PASSWORDPASSWORDPASSWORD"],
    ],
)
def test_a_usage_error_never_echoes_a_password(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Before: ``unrecognized arguments: --notify json://user:PASSWORD@…`` printed the
    password (and any value argparse could not read, verbatim)."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert "PASSWORD" not in err and "***" in err, err


def test_a_variable_that_cannot_be_used_says_which_and_what_it_takes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``CODEX_PRESENCE_PORT=abc`` said "invalid literal for int() with base 10"."""
    monkeypatch.setenv("CODEX_PRESENCE_PORT", "abc")
    assert main(["broker"]) == 2
    assert capsys.readouterr().err == (
        "codex-presence broker: CODEX_PRESENCE_PORT='abc' is not a whole number (it sets --port)\n"
    )
    monkeypatch.delenv("CODEX_PRESENCE_PORT")
    monkeypatch.setenv("CODEX_PRESENCE_REDIS", "redis://:PASSWORD@example.com")
    monkeypatch.setenv("CODEX_PRESENCE_ACTIVITY_TTL", "soon")
    assert main(["broker"]) == 2
    assert capsys.readouterr().err == (
        "codex-presence broker: CODEX_PRESENCE_ACTIVITY_TTL='soon' is not a number "
        "(it sets --activity-ttl)\n"
    )


@pytest.mark.parametrize(
    "command",
    [["broker", "--port", "0"], ["mcp"], ["wrap", "--", "true"], ["codex"], ["claude"]],
)
def test_a_log_file_that_cannot_be_opened_is_a_usage_error_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    """Before: ``broker --log-file /nonexistent/x.log`` ended in a FileNotFoundError
    traceback (the runners checked their --log-file first; broker and mcp did not). The
    runners say it before their child starts, in the same words."""
    log = f"{tmp_path}/no/such/dir/x.log"
    assert main([command[0], "--log-file", log, *command[1:]]) == 2
    assert capsys.readouterr().err == (
        f"codex-presence {command[0]}: --log-file {log}: No such file or directory\n"
    )


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("CODEX_PRESENCE_PASSING_HOLD", "abc", "'abc' is not a number of seconds"),
        ("CODEX_PRESENCE_EXIT_GRACE", "-5", "'-5' is not between 0 and 60 seconds"),
    ],
)
def test_a_variable_an_option_checks_itself_is_refused_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    reason: str,
) -> None:
    """Before: ``CODEX_PRESENCE_PASSING_HOLD=abc codex-presence wrap -- codex app-server``
    ended in a traceback (argparse.ArgumentTypeError): only ValueError and TypeError were
    caught, and the options that check their own value raise argparse's error."""
    monkeypatch.setenv(variable, value)
    assert main(["wrap", "--", "true"]) == 2
    assert capsys.readouterr().err == f"codex-presence wrap: {variable}: {reason}\n"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("soon", "'soon' is not a number of seconds"),
        ("-1", "'-1' is not between 0 and 3600 seconds"),
        ("nan", "'nan' is not between 0 and 3600 seconds"),
        ("1e9", "'1e9' is not between 0 and 3600 seconds"),
    ],
)
def test_a_passing_hold_out_of_range_is_a_usage_error_naming_it(
    capsys: pytest.CaptureFixture[str], value: str, reason: str
) -> None:
    code, out, err = run(capsys, "wrap", "--passing-hold", value, "--", "true")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        f"codex-presence wrap: error: argument --passing-hold: {reason}"
    ), err


@pytest.mark.parametrize(
    ("broker", "reason"),
    [
        ("htp://127.0.0.1:8765", "'htp://127.0.0.1:8765': a broker's URL starts with http://"),
        ("127.0.0.1:8765", "'127.0.0.1:8765' is not a URL: a broker's URL starts with http://"),
    ],
)
def test_a_runner_given_no_broker_url_says_so_once_and_does_not_report(
    caplog: pytest.LogCaptureFixture, broker: str, reason: str
) -> None:
    """Before: ``wrap --broker htp://127.0.0.1:8765`` logged "cannot reach the presence
    broker … unsupported protocol; retrying" and "cannot report activity to the broker
    (UnsupportedProtocol); retrying with backoff", and retried for the whole session
    something no retry could reach. ``roster`` refuses such a URL; a runner keeps its child
    running, and says once why it does not report."""
    from codex_presence.cli import runner
    from codex_presence.cli.main import build_parser

    args = build_parser({}).parse_args(["wrap", "--broker", broker, "--", "true"])
    with caplog.at_level("ERROR", logger="codex_presence"):
        link = runner.broker_link(args, environ={"CODEX_PRESENCE_TOKEN": "cp_" + "a" * 40})
    assert link is None
    [said] = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"not reporting to a broker: --broker {reason}"), said


def test_a_broker_url_from_the_environment_is_named_by_its_variable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from codex_presence.cli import runner
    from codex_presence.cli.main import build_parser

    environ = {"CODEX_PRESENCE_BROKER": "127.0.0.1:8765", "CODEX_PRESENCE_TOKEN": "cp_" + "a" * 40}
    args = build_parser(environ).parse_args(["wrap", "--", "true"])
    with caplog.at_level("ERROR", logger="codex_presence"):
        assert runner.broker_link(args, environ=environ) is None
    [said] = [r.getMessage() for r in caplog.records]
    assert said.startswith("not reporting to a broker: CODEX_PRESENCE_BROKER '127.0.0.1:8765'")


def test_a_broker_url_from_our_environment_is_named_by_its_variable_for_every_runner(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the runners call it: ``environ`` holds only the token they took out of ours, and
    the broker's variable stays in ours. (Before: the variable was looked up in ``environ``
    alone, so ``wrap``, ``codex`` and ``claude`` all said ``--broker``, never typed.)"""
    import os

    from codex_presence._env import TOKEN_ENV
    from codex_presence.cli import runner
    from codex_presence.cli.main import build_parser

    monkeypatch.setenv("CODEX_PRESENCE_BROKER", "127.0.0.1:8765")
    args = build_parser(dict(os.environ)).parse_args(["codex", "--", "codex"])
    with caplog.at_level("ERROR", logger="codex_presence"):
        assert runner.broker_link(args, environ={TOKEN_ENV: "cp_" + "a" * 40}) is None
    [said] = [r.getMessage() for r in caplog.records]
    assert said.startswith("not reporting to a broker: CODEX_PRESENCE_BROKER '127.0.0.1:8765'")


def test_a_repeatable_option_from_the_environment_gives_way_to_the_command_line() -> None:
    """``CODEX_PRESENCE_NOTIFY`` beside ``--notify`` (or ``CODEX_PRESENCE_MEMBERS`` beside
    ``team init --member``): the command line's values win. (Before: argparse appended to
    the variable's string, an AttributeError traceback.)"""
    from codex_presence.cli.main import build_parser

    environ = {"CODEX_PRESENCE_NOTIFY": "json://a json://b", "CODEX_PRESENCE_MEMBERS": "zed"}
    parser = build_parser(environ)
    assert parser.parse_args(["broker"]).notify == ["json://a json://b"]
    assert parser.parse_args(["broker", "--notify", "json://c"]).notify == ["json://c"]
    assert parser.parse_args(["broker"]).notify == ["json://a json://b"]  # not appended to
    init = parser.parse_args(["team", "init", "t.toml", "-m", "alice", "-m", "bob"])
    assert init.members == ["alice", "bob"]


def test_the_passing_hold_reaches_the_report_policy() -> None:
    from codex_presence.cli import runner
    from codex_presence.cli.main import build_parser

    args = build_parser({}).parse_args(
        ["wrap", "--broker", "http://127.0.0.1:9", "--passing-hold", "2.5", "--", "true"]
    )
    link = runner.broker_link(args, environ={"CODEX_PRESENCE_TOKEN": "cp_" + "a" * 40})
    assert link is not None and link._policy is not None
    assert link._policy.passing_hold == 2.5
    args = build_parser({}).parse_args(["wrap", "--broker", "http://127.0.0.1:9", "--", "true"])
    link = runner.broker_link(args, environ={"CODEX_PRESENCE_TOKEN": "cp_" + "a" * 40})
    assert link is not None and link._policy is None  # the reporter's default: PASSING_HOLD


def test_the_exit_grace_reaches_the_link_and_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    from codex_presence.cli import runner
    from codex_presence.cli.main import build_parser

    args = build_parser({}).parse_args(
        ["wrap", "--broker", "http://127.0.0.1:9", "--exit-grace", "7.5", "--", "true"]
    )
    link = runner.broker_link(args, environ={"CODEX_PRESENCE_TOKEN": "cp_" + "a" * 40})
    assert link is not None and link.settings.exit_grace == 7.5
    code, _, err = run(capsys, "wrap", "--exit-grace", "61", "--", "true")
    assert code == 2
    assert err.splitlines()[-1] == (
        "codex-presence wrap: error: argument --exit-grace: '61' is not between 0 and 60 seconds"
    )


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_the_version_is_told(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """Before: ``-V`` said "the following arguments are required: COMMAND"."""
    from codex_presence import __version__

    with pytest.raises(SystemExit) as done:
        main([flag])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"codex-presence {__version__}\n"


@pytest.mark.parametrize("pasted", ["…", "...", "<token>"])
def test_the_docs_placeholder_pasted_as_a_token_is_said_to_be_one(pasted: str) -> None:
    """Before: ``CODEX_PRESENCE_TOKEN=…`` pasted from the docs gave "holds whitespace or
    non-ASCII characters", with no word that it is a placeholder."""
    from codex_presence.client.auth import TokenError, read_token

    with pytest.raises(TokenError, match="the docs' placeholder: put a member's token there"):
        read_token(token_file=None, environ={"CODEX_PRESENCE_TOKEN": pasted})


def test_a_client_not_on_path_is_told_where_to_get(caplog: pytest.LogCaptureFixture) -> None:
    """Before: ``codex-presence claude -- claude`` without claude on PATH (the tests install
    it under a cache) said only "cannot run claude: No such file or directory"."""
    from codex_presence.agent.signals import cannot_run

    missing = FileNotFoundError(2, "No such file or directory")
    assert cannot_run(["claude"], missing) == 127
    assert cannot_run(["/opt/x/codex", "app-server"], missing) == 127
    assert cannot_run(["vim"], missing) == 127
    assert cannot_run(["gemini"], missing) == 127
    said = [r.getMessage() for r in caplog.records]
    assert "npm install -g @anthropic-ai/claude-code" in said[0]
    assert "claude-code-VERSION/node_modules/.bin/claude" in said[0]
    assert "npm install -g @openai/codex" in said[1]
    assert said[2] == "cannot run vim: No such file or directory"
    assert "(not on PATH: install Gemini CLI with npm install -g @google/gemini-cli" in said[3]


@pytest.mark.parametrize(
    ("command", "given", "environ", "client", "share"),
    [
        ("wrap", [], {}, "codex-app-server", "default"),
        ("codex", ["--share", "none"], {}, "codex-tui", "none"),
        ("claude", [], {"CODEX_PRESENCE_SHARE": "detail"}, "claude", "detail"),
        ("claude", ["--share", "default"], {"CODEX_PRESENCE_SHARE": "none"}, "claude", "default"),
    ],
)
def test_the_share_level_and_the_client_reach_the_link(
    command: str, given: list[str], environ: dict[str, str], client: str, share: str
) -> None:
    from codex_presence.cli import runner
    from codex_presence.cli.main import build_parser
    from codex_presence.core.agent_record import Share

    args = build_parser(environ).parse_args(
        [command, "--broker", "http://127.0.0.1:9", *given, "--", "true"]
    )
    link = runner.broker_link(args, environ={"CODEX_PRESENCE_TOKEN": "cp_" + "a" * 40})
    assert link is not None
    assert (link.settings.client, link.settings.share) == (client, Share(share))


def test_an_unknown_share_level_is_refused_naming_the_levels(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run(capsys, "wrap", "--share", "all", "--", "true")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        "codex-presence wrap: error: argument --share: 'all' is not a share level"
        " (one of: none, default, detail)"
    ), err
    monkeypatch.setenv("CODEX_PRESENCE_SHARE", "everything")
    assert main(["wrap", "--", "true"]) == 2
    assert capsys.readouterr().err == (
        "codex-presence wrap: CODEX_PRESENCE_SHARE: 'everything' is not a share level"
        " (one of: none, default, detail)\n"
    )


def test_a_reader_gone_is_quiet_but_no_other_error_is() -> None:
    """``main`` says nothing when its stdout's reader went away (``| head``), whatever the
    command; a broken pipe among other errors, or of a socket, is no such thing."""
    from codex_presence.cli.main import _broken_pipes_only

    gone = BrokenPipeError(32, "Broken pipe")
    assert _broken_pipes_only(gone)
    assert _broken_pipes_only(BaseExceptionGroup("task group", [gone]))
    assert _broken_pipes_only(ExceptionGroup("outer", [ExceptionGroup("inner", [gone])]))
    assert not _broken_pipes_only(ExceptionGroup("mixed", [gone, ValueError("bug")]))
    assert not _broken_pipes_only(ConnectionResetError(104, "reset"))
