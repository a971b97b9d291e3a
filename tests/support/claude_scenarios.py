"""Scripted Claude Code sessions, run against the real binary to capture their hooks.

    .venv/bin/python -m tests.support.claude_scenarios [NAME...]          # all scenarios
    .venv/bin/python -m tests.support.claude_scenarios --show NAME        # and print the capture

Each scenario is an API script (what the fake Messages API answers, in order) plus a drive
(what the person at the keyboard does: prompts, Esc, answers to a permission dialog,
``/exit``), run in a private home by ``bench/_claude_driver.py``. The recordings go to
``fixtures/claude-code-<version>/<name>.jsonl``, holding the hook POSTs and the transcript
entries of :data:`RECORDED_TYPES`; ``<name>.keys.json`` beside each says what the driver did
and when (no live hook server can know that; it is there for whoever writes the expected
timeline). Drives wait on hooks, the transcript or the screen, never on fixed sleeps, except
where a scenario is about time passing (the ~6 s permission notification).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

if __package__ in (None, ""):  # run as a script: make `tests.` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._claude_driver import (
    CLAUDE_VERSION,
    Capture,
    HookAnswer,
    Interactive,
    interactive,
    run_print,
)
from bench._fake_anthropic import (
    FakeAnthropic,
    Reply,
    bash,
    last_user_texts,
    say,
    text,
    tool_results,
    tool_use,
)

__all__ = [
    "FIXTURES",
    "RECORDED_TYPES",
    "SCENARIOS",
    "Scenario",
    "after_result",
    "asks",
    "describe",
    "record",
]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / f"claude-code-{CLAUDE_VERSION}"

RECORDED_TYPES = frozenset({"user", "assistant", "system", "queue-operation"})
"""Transcript entry types that go into a fixture: the conversation, its ``system`` markers
(``turn_duration``…) and the prompt queue (a prompt sent while a turn runs). The rest
(``attachment``, ``api-request-shape`` with the whole system prompt, ``file-history-snapshot``,
``mode``…) is bookkeeping, and large."""

Message = dict[str, Any]

PERMISSION_DIALOG = r"Do you want to proceed\?"

LONG = "echo waiting && sleep 30"
"""A command that runs long. (A command that *starts* with ``sleep N``, N ≥ 2, is refused
by Claude Code itself, before any PreToolUse: "Blocked: standalone sleep 30".)"""


@dataclass
class Scenario:
    name: str
    about: str
    replies: Callable[[], list[Reply]]
    drive: Callable[[Interactive, FakeAnthropic], None] | None = None
    """Interactive scenarios; ``None`` means print mode with :attr:`prompt`."""
    prompt: str = ""
    args: tuple[str, ...] = ("--permission-mode", "default")
    answer: HookAnswer | None = None
    status: int = 0
    """The exit status a print-mode scenario expects."""
    config: dict[str, Any] | None = None
    """Keys added to ``.claude.json``."""


SCENARIOS: dict[str, Scenario] = {}


def scenario(
    about: str,
    replies: Callable[[], list[Reply]],
    *,
    args: tuple[str, ...] = ("--permission-mode", "default"),
    config: dict[str, Any] | None = None,
) -> Callable[[Callable[[Interactive, FakeAnthropic], None]], Callable[..., None]]:
    def register(drive: Callable[[Interactive, FakeAnthropic], None]) -> Callable[..., None]:
        SCENARIOS[drive.__name__] = Scenario(
            drive.__name__, about, replies, drive, args=args, config=config
        )
        return drive

    return register


def _print_scenario(
    name: str, about: str, prompt: str, replies: Callable[[], list[Reply]], **kw: Any
) -> None:
    SCENARIOS[name] = Scenario(name, about, replies, None, prompt=prompt, **kw)


def after_result(tool_id: str) -> Callable[[Message], bool]:
    """A match for the request that carries the result of tool call ``tool_id``."""
    return lambda body: tool_id in tool_results(body)


def asks(text_: str) -> Callable[[Message], bool]:
    """A match for the request whose last user message contains ``text_``."""
    return lambda body: any(text_ in t for t in last_user_texts(body))


# -- print mode ----------------------------------------------------------------------------------

_print_scenario(
    "print_tool",
    "claude -p: one Bash call allowed by --allowedTools, then a final text.",
    "run echo hi",
    lambda: [
        Reply(blocks=[text("Running it."), bash("echo hi", id="toolu_print01")]),
        say("It printed hi.", match=after_result("toolu_print01")),
    ],
    args=("--allowedTools", "Bash(echo hi)"),
)


_print_scenario(
    "print_tool_fails",
    "claude -p: one allowed Bash call that exits 3, then a final text.",
    "run a failing command",
    lambda: [
        Reply(blocks=[bash("echo failing && exit 3", id="toolu_fail01")]),
        say("It failed.", match=after_result("toolu_fail01")),
    ],
    args=("--allowedTools", "Bash"),
)


_print_scenario(
    "print_api_error",
    "claude -p: the API answers every request 400 (claude tries 6 times); the turn fails.",
    "hello",
    lambda: [Reply(status=400, match=None) for _ in range(10)],
    status=1,
)


# -- interactive ---------------------------------------------------------------------------------


def _exit(s: Interactive) -> None:
    """Type ``/exit`` at an idle prompt and wait for claude to end.

    An interrupt can put the interrupted prompt back in the input box: Ctrl+U clears it."""
    s.capture.mark()
    s.key("C-u")
    s.prompt("/exit")
    s.wait_exit(20)


@scenario(
    "A command that needs permission; the dialog is answered Yes; it runs; the turn ends.",
    lambda: [
        Reply(blocks=[text("Making the file."), bash("touch made.txt", id="toolu_yes01")]),
        say("Made it.", match=after_result("toolu_yes01")),
    ],
)
def permission_yes(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("make a file")
    s.capture.wait_hook("PermissionRequest")
    s.answer_dialog("Enter")  # option 1, Yes, is selected
    s.capture.wait_hook("Stop")
    s.capture.wait_transcript(lambda m: m.get("subtype") == "turn_duration", 10)
    _exit(s)


@scenario(
    "A command that needs permission; the dialog is answered No (option 4); the turn ends.",
    lambda: [
        Reply(blocks=[text("Making the file."), bash("touch made.txt", id="toolu_no01")]),
        say("Understood, I will not.", match=after_result("toolu_no01")),
    ],
)
def permission_no(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("make a file")
    s.capture.wait_hook("PermissionRequest")
    s.answer_dialog("4")
    s.tmux.wait_screen(r"shortcuts", 10)
    _settle(s, 3.0)
    _exit(s)


@scenario(
    "A command that needs permission; the dialog waits 8 s (past the ~6 s notification), then Yes.",
    lambda: [
        Reply(blocks=[bash("touch made.txt", id="toolu_late01")]),
        say("Made it.", match=after_result("toolu_late01")),
    ],
)
def permission_late_yes(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("make a file")
    s.capture.wait_hook("PermissionRequest")
    s.tmux.wait_screen(PERMISSION_DIALOG)
    s.capture.wait_hook("Notification", 15)
    s.answer_dialog("Enter")
    s.capture.wait_hook("Stop")
    _settle(s, 1.0)
    _exit(s)


@scenario(
    "Esc at a permission dialog: the tool never runs, no hook says so.",
    lambda: [
        Reply(blocks=[text("Making the file."), bash("touch made.txt", id="toolu_escp01")]),
        say("unused", match=after_result("toolu_escp01")),
    ],
)
def esc_at_permission(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("make a file")
    s.capture.wait_hook("PermissionRequest")
    s.answer_dialog("Escape")
    s.tmux.wait_screen(r"shortcuts", 10)
    _settle(s, 3.0)
    _exit(s)


@scenario(
    "Esc while an allowed command (sleep 30) runs.",
    lambda: [
        Reply(blocks=[text("Waiting."), bash(LONG, id="toolu_esct01")]),
        say("unused", match=after_result("toolu_esct01")),
    ],
    args=("--permission-mode", "default", "--allowedTools", "Bash"),
)
def esc_during_tool(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("wait a while")
    s.capture.wait_hook("PreToolUse")
    s.tmux.wait_screen(r"sleep 30", 10)
    time.sleep(1.0)  # the command is running
    s.key("Escape")
    _settle(s, 3.0)
    _exit(s)


@scenario(
    "Esc while the model is still streaming its answer (a slow reply).",
    lambda: [Reply(blocks=[text("A slow answer, word by word.")], delay=1.0)],
)
def esc_during_stream(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("answer slowly")
    s.capture.wait_hook("UserPromptSubmit")
    api.wait_requests(1, 10)
    time.sleep(1.5)
    s.key("Escape")
    _settle(s, 3.0)
    _exit(s)


@scenario(
    "Two prompts in a row, each a plain text answer.",
    lambda: [
        say("First answer.", match=asks("first question")),
        say("Second answer.", match=asks("second question")),
    ],
)
def two_prompts(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("first question")
    s.capture.wait_hook("Stop")
    s.tmux.wait_screen(r"First answer", 10)
    s.prompt("second question")
    s.capture.wait_hook("Stop")
    _settle(s, 1.0)
    _exit(s)


@scenario(
    "A second prompt submitted while the first turn runs a command (echo busy && sleep 5).",
    lambda: [
        Reply(blocks=[bash("echo busy && sleep 5", id="toolu_busy01")], match=asks("first task")),
        say("Both done.", match=after_result("toolu_busy01")),
    ],
    args=("--permission-mode", "default", "--allowedTools", "Bash"),
)
def prompt_while_tool(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("first task")
    s.capture.wait_hook("PreToolUse")
    time.sleep(1.0)
    s.prompt("second task")
    s.capture.wait_hook("Stop", 15)
    _settle(s, 3.0)
    _exit(s)


@scenario(
    "A second prompt submitted while the model streams the first answer (a slow reply).",
    lambda: [
        Reply(blocks=[text("The first answer, slowly.")], delay=0.7, match=asks("first task")),
        say("Second answer.", match=asks("second task")),
    ],
)
def prompt_while_streaming(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("first task")
    s.capture.wait_hook("UserPromptSubmit")
    api.wait_requests(1, 10)
    time.sleep(1.0)
    s.prompt("second task")
    _settle(s, 10.0, until="Second answer")
    _settle(s, 2.0)
    _exit(s)


@scenario(
    "/exit at an idle prompt after one turn.",
    lambda: [say("Hello.")],
)
def exit_after_turn(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("hello")
    s.capture.wait_hook("Stop")
    _exit(s)


@scenario(
    "/exit as the first thing: no prompt, no transcript path known before SessionEnd.",
    list,
)
def exit_at_once(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    _exit(s)


@scenario(
    "Ctrl+C while a command runs (an interrupt, like Esc), then Ctrl+C twice to leave claude.",
    lambda: [Reply(blocks=[bash(LONG, id="toolu_ctrlc01")])],
    args=("--permission-mode", "default", "--allowedTools", "Bash"),
)
def ctrl_c_during_tool(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("wait a while")
    s.capture.wait_hook("PreToolUse")
    time.sleep(1.0)
    s.key("C-c")
    _settle(s, 3.0)
    s.key("C-c")
    time.sleep(0.2)
    s.key("C-c")
    s.wait_exit(20)


@scenario(
    "Esc once part of a slow text answer is on the screen.",
    lambda: [Reply(blocks=[text("A slow answer, word by word.")], delay=1.0)],
)
def esc_after_partial_text(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("answer slowly")
    s.tmux.wait_screen(r"A slow answer", 15)
    s.key("Escape")
    _settle(s, 3.0)
    _exit(s)


@scenario(
    "Esc while the model streams (slowly) its answer to a tool result.",
    lambda: [
        Reply(blocks=[bash("echo hi", id="toolu_escr01")]),
        Reply(
            blocks=[text("It printed hi, and more.")],
            delay=1.0,
            match=after_result("toolu_escr01"),
        ),
    ],
    args=("--permission-mode", "default", "--allowedTools", "Bash(echo hi)"),
)
def esc_streaming_after_tool(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("say hi")
    s.capture.wait_hook("PostToolUse")
    api.wait_requests(2, 10)
    time.sleep(1.5)
    s.key("Escape")
    _settle(s, 3.0)
    _exit(s)


@scenario(
    "Idle after a turn, with the idle notification threshold at 2 s (60 s by default).",
    lambda: [say("Hello.")],
    config={"messageIdleNotifThresholdMs": 2000},
)
def idle_notification(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("hello")
    s.capture.wait_hook("Stop")
    s.capture.wait_hook("Notification", 15)
    _settle(s, 1.0)
    _exit(s)


@scenario(
    "A foreground subagent (Agent, run_in_background false) that runs echo, then the answer.",
    lambda: [
        Reply(
            blocks=[
                tool_use(
                    "Agent",
                    {
                        "description": "say hi",
                        "prompt": "SUBTASK: run echo sub",
                        "subagent_type": "general-purpose",
                        "run_in_background": False,
                    },
                    id="toolu_agent01",
                )
            ],
            match=asks("delegate it"),
        ),
        Reply(blocks=[bash("echo sub", id="toolu_sub01")], match=asks("SUBTASK")),
        say("Sub done.", match=after_result("toolu_sub01")),
        say("The agent is done.", match=after_result("toolu_agent01")),
    ],
    args=("--permission-mode", "default", "--allowedTools", "Bash(echo sub)"),
)
def subagent(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("delegate it")
    s.capture.wait_hook("SubagentStop", 30)
    s.capture.wait_hook("Stop", 30)
    _settle(s, 1.0)
    _exit(s)


@scenario(
    "A background subagent (the default) that runs sleep 3: the main turn ends before it does.",
    lambda: [
        Reply(
            blocks=[
                tool_use(
                    "Agent",
                    {
                        "description": "wait a bit",
                        "prompt": "SUBTASK: wait 3 s",
                        "subagent_type": "general-purpose",
                    },
                    id="toolu_bgagent01",
                )
            ],
            match=asks("delegate it"),
        ),
        Reply(blocks=[bash("echo sub && sleep 3", id="toolu_bgsub01")], match=asks("SUBTASK")),
        say("Sub done.", match=after_result("toolu_bgsub01")),
        say("Started it.", match=after_result("toolu_bgagent01")),
    ],
    args=("--permission-mode", "default", "--allowedTools", "Bash"),
)
def subagent_background(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("delegate it")
    s.capture.wait_hook("SubagentStop", 30)
    _settle(s, 6.0)
    _exit(s)


@scenario(
    "A background command (Bash run_in_background, sleep 3): the turn ends while it runs.",
    lambda: [
        Reply(
            blocks=[
                tool_use(
                    "Bash",
                    {
                        "command": "echo bg && sleep 3",
                        "description": "wait",
                        "run_in_background": True,
                    },
                    id="toolu_bg01",
                )
            ],
            match=asks("in the background"),
        ),
        say("Started it.", match=after_result("toolu_bg01")),
    ],
    args=("--permission-mode", "default", "--allowedTools", "Bash"),
)
def background_command(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("wait in the background")
    s.capture.wait_hook("Stop")
    _settle(s, 8.0)
    _exit(s)


@scenario(
    "AskUserQuestion: the model asks the person a multiple-choice question; they pick one.",
    lambda: [
        Reply(
            blocks=[
                tool_use(
                    "AskUserQuestion",
                    {
                        "questions": [
                            {
                                "question": "Which colour?",
                                "header": "Colour",
                                "multiSelect": False,
                                "options": [
                                    {"label": "Red", "description": "warm"},
                                    {"label": "Blue", "description": "cold"},
                                ],
                            }
                        ]
                    },
                    id="toolu_ask01",
                )
            ],
            match=asks("ask me"),
        ),
        say("Noted.", match=after_result("toolu_ask01")),
    ],
)
def ask_user_question(s: Interactive, api: FakeAnthropic) -> None:
    s.ready()
    s.prompt("ask me")
    s.tmux.wait_screen(r"Which colour", 15)
    s.snap()
    _settle(s, 8.0)
    s.key("Enter")
    _settle(s, 3.0)
    _exit(s)


def _settle(s: Interactive, seconds: float, *, until: str | None = None) -> None:
    """Let time pass (the point of the scenario), or until the screen shows ``until``."""
    if until is not None:
        s.tmux.wait_screen(until, seconds)
        time.sleep(1.0)
        return
    time.sleep(seconds)


# -- running ---------------------------------------------------------------------------------


def record(
    name: str,
    out: Path | None,
    *,
    root: Path,
    full: Path | None = None,
    types: frozenset[str] | None = RECORDED_TYPES,
) -> Capture:
    """Run one scenario; write its recording to ``out`` (and everything to ``full``)."""
    sc = SCENARIOS[name]
    api = FakeAnthropic(sc.replies())
    with api.serve():
        if sc.drive is None:
            run = run_print(
                root,
                sc.prompt,
                base_url=api.base_url,
                args=sc.args,
                recording=full,
                answer=sc.answer,
                config=sc.config,
            )
            if run.returncode != sc.status:
                raise RuntimeError(f"claude -p exited {run.returncode}: {run.stderr[-500:]}")
            cap = run.capture
        else:
            with interactive(
                root,
                base_url=api.base_url,
                args=sc.args,
                recording=full,
                answer=sc.answer,
                config=sc.config,
            ) as s:
                try:
                    sc.drive(s, api)
                except Exception:
                    print(s.tmux.screen(), file=sys.stderr)
                    raise
                cap = s.capture
    if api.pending:
        print(f"note {name}: {api.pending} scripted replies left unused", file=sys.stderr)
    if out is not None:
        write_recording(cap, out, types)
    return cap


def write_recording(cap: Capture, out: Path, types: frozenset[str] | None) -> None:
    """The capture as a fixture: hook and kept transcript lines, the end line; keys beside."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:
        for t, source, msg in cap.entries:
            if source == "transcript" and types is not None and msg.get("type") not in types:
                continue
            f.write(orjson.dumps({"t": round(t, 6), "from": source, "msg": msg}) + b"\n")
        end = cap.end_at if cap.end_at is not None else cap.now()
        # A last read of the transcript can come after claude's exit: the end stays last.
        end = max([end, *(t for t, _, _ in cap.entries)])
        f.write(orjson.dumps({"t": round(end, 6), "end": "eof"}) + b"\n")
    # Not .jsonl: a glob for recordings must not pick it up.
    actions = [{"t": round(t, 6), "action": what} for t, what in cap.actions]
    out.with_suffix(".keys.json").write_bytes(
        b"[\n" + b",\n".join(orjson.dumps(a) for a in actions) + b"\n]\n"
    )


def describe(cap: Capture) -> str:
    """One line per hook, transcript entry and action: what a reader needs of each."""
    rows: list[tuple[float, str]] = [(t, f"    >>> {what}") for t, what in cap.actions]
    for t, source, m in cap.entries:
        if source == "hook":
            rows.append((t, "HOOK " + _hook_line(m)))
        elif source == "session":
            keys = ("status", "waitingFor", "tempo", "state", "detail", "needs")
            rows.append((t, "    SESSION " + " ".join(f"{k}={m[k]!r}" for k in keys if k in m)))
        else:
            line = _transcript_line(m)
            if line:
                rows.append((t, "  tr " + line))
    rows.sort(key=lambda r: r[0])
    out = [f"{t:8.3f} {line}" for t, line in rows]
    if cap.end_at is not None:
        out.append(f"{cap.end_at:8.3f} END")
    return "\n".join(out)


def _short(value: Any) -> str:
    return str(value)[:8] if value else "-"


def _hook_line(m: Message) -> str:
    event = m.get("hook_event_name")
    parts = [str(event), f"prompt={_short(m.get('prompt_id'))}"]
    for key in (
        "tool_name",
        "tool_use_id",
        "notification_type",
        "message",
        "reason",
        "agent_id",
        "agent_type",
        "error",
        "stop_hook_active",
        "background_tasks",
        "prompt",
    ):
        if key in m:
            parts.append(f"{key}={str(m[key])[:70]!r}")
    known = {
        "session_id",
        "transcript_path",
        "cwd",
        "prompt_id",
        "permission_mode",
        "hook_event_name",
        "tool_input",
        "tool_response",
        "effort",
        "last_assistant_message",
        "tool_calls",
        "permission_suggestions",
        "agent_transcript_path",
    }
    extra = sorted(set(m) - known - {p.split("=")[0] for p in parts})
    if extra:
        parts.append(f"+{extra}")
    return " ".join(parts)


def _transcript_line(m: Message) -> str:
    kind = m.get("type")
    side = " side" if m.get("isSidechain") else ""
    if kind == "system":
        return f"system/{m.get('subtype')}{side} {str(m.get('content') or '')[:60]!r}"
    if kind in ("user", "assistant"):
        content = (m.get("message") or {}).get("content")
        bits: list[str] = []
        if isinstance(content, str):
            bits.append(repr(content[:70]))
        for c in content if isinstance(content, list) else []:
            if c.get("type") == "text":
                bits.append(repr(c.get("text", "")[:70]))
            elif c.get("type") == "tool_use":
                bits.append(f"tool_use {c.get('name')} {c.get('id')}")
            elif c.get("type") == "tool_result":
                body = c.get("content")
                if isinstance(body, list):
                    body = " ".join(str(b.get("text", "")) for b in body if isinstance(b, dict))
                bits.append(
                    f"tool_result {c.get('tool_use_id')} err={c.get('is_error')} {str(body)[:60]!r}"
                )
            else:
                bits.append(str(c.get("type")))
        stop = (m.get("message") or {}).get("stop_reason")
        extra = f" stop={stop}" if stop else ""
        if m.get("toolUseResult") is not None and isinstance(m.get("toolUseResult"), dict):
            tur = m["toolUseResult"]
            flags = {k: tur[k] for k in ("interrupted", "isImage", "backgroundTaskId") if k in tur}
            if flags:
                extra += f" result={flags}"
        return f"{kind}{side} {'; '.join(bits)}{extra}"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {sorted(SCENARIOS)}")
    parser.add_argument("--out", type=Path, default=FIXTURES, help="output directory")
    parser.add_argument("--show", action="store_true", help="print each capture")
    parser.add_argument(
        "--full", type=Path, default=None, help="also write unfiltered captures here"
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    scratch = Path(tempfile.gettempdir()) / "codex-presence-claude"
    failed = 0
    for name in args.names or list(SCENARIOS):
        start = time.monotonic()
        out = args.out / f"{name}.jsonl"
        full = args.full / f"{name}.jsonl" if args.full else None
        try:
            cap = record(name, out, root=scratch / name, full=full)
        except Exception as exc:  # report every scenario, then fail
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        print(f"{name}: {len(cap.entries)} entries in {time.monotonic() - start:.1f}s -> {out}")
        if args.show:
            print(describe(cap))
            print()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
