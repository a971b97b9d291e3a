"""Scripted Gemini CLI sessions, run against the real binary to capture their hooks.

    .venv/bin/python -m tests.support.gemini_scenarios [NAME...]          # all scenarios
    .venv/bin/python -m tests.support.gemini_scenarios --show NAME        # and print them

Each scenario is an API script (what the fake Gemini API answers, in order) plus a drive
(what the person at the keyboard does: a prompt, an answer to the approval, Esc, ``/quit``),
run in a private home by :mod:`tests.support.gemini_driver`. The recordings go to
``fixtures/gemini-cli-<version>/<name>.jsonl``: every hook event's JSON and every line of
gemini's chat file, in the order the capture saw them, in claude's recording format
(``from`` ``hook`` or ``transcript``); ``<name>.keys.json`` beside each says what the driver
did and when, for whoever writes the expected timeline (``<name>.expected.json``, by hand).
Drives wait on hooks, the chat file or the screen, never on fixed sleeps.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `tests.` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._claude_driver import Capture
from bench._fake_gemini import FakeGemini, Reply, function_responses, say, shell, text
from codex_presence.core.gemini.protocol import CAPTURED
from tests.support.claude_scenarios import write_recording
from tests.support.gemini_driver import (
    GEMINI_VERSION,
    GeminiSession,
    interactive,
    run_print,
)

__all__ = ["CANCELLED", "FIXTURES", "SCENARIOS", "Scenario", "record"]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / f"gemini-cli-{GEMINI_VERSION}"

CANCELLED = "Request cancelled."
"""The ``info`` line gemini writes to its chat file at an Esc (no hook fires for it)."""

Message = dict[str, Any]


@dataclass
class Scenario:
    name: str
    about: str
    replies: Callable[[], list[Reply]]
    drive: Callable[[GeminiSession, FakeGemini], None] | None = None
    """Interactive scenarios; ``None`` means print mode with :attr:`prompt`."""
    prompt: str = ""
    args: tuple[str, ...] = ()


SCENARIOS: dict[str, Scenario] = {}


def scenario(
    about: str, replies: Callable[[], list[Reply]]
) -> Callable[[Callable[[GeminiSession, FakeGemini], None]], Callable[..., None]]:
    def register(drive: Callable[[GeminiSession, FakeGemini], None]) -> Callable[..., None]:
        SCENARIOS[drive.__name__] = Scenario(drive.__name__, about, replies, drive)
        return drive

    return register


def after_shell(body: Message) -> bool:
    """A match for the request that carries a ``run_shell_command`` result."""
    return "run_shell_command" in function_responses(body)


def _cancelled(msg: Message) -> bool:
    return msg.get("type") == "info" and msg.get("content") == CANCELLED


def _quit(s: GeminiSession) -> None:
    s.prompt("/quit")
    status = s.wait_exit(60)
    if status != 0:
        raise RuntimeError(f"gemini exited {status} after /quit")


# -- print mode ----------------------------------------------------------------------------------

SCENARIOS["print_prompt"] = Scenario(
    "print_prompt",
    "gemini -p: one prompt, a text answer, the process exits.",
    lambda: [say("Hello from the fake.")],
    prompt="say hello",
)

SCENARIOS["print_tool"] = Scenario(
    "print_tool",
    "gemini -p --approval-mode yolo: one shell command (no approval), then a final text.",
    lambda: [
        Reply(parts=[text("Running it."), shell("echo hi")]),
        say("It printed hi.", match=after_shell),
    ],
    prompt="run echo hi",
    args=("--approval-mode", "yolo"),
)


# -- interactive ---------------------------------------------------------------------------------


@scenario(
    "One prompt, a text answer; then /quit.",
    lambda: [say("Hello there.")],
)
def prompt(s: GeminiSession, api: FakeGemini) -> None:
    s.ready()
    s.prompt("say hello")
    s.capture.wait_hook("AfterAgent", 60)
    _quit(s)


@scenario(
    "A shell command that needs approval, answered 'Allow once'; it runs; the turn ends.",
    lambda: [
        Reply(parts=[shell("echo hi > made.txt")]),
        say("Made it.", match=after_shell),
    ],
)
def approval_allow(s: GeminiSession, api: FakeGemini) -> None:
    s.ready()
    s.prompt("make a file")
    s.capture.wait_hook("Notification", 60, notification_type="ToolPermission")
    s.answer_dialog("Enter")  # 1. Allow once (the highlighted choice)
    s.capture.wait_hook("AfterAgent", 60)
    _quit(s)


@scenario(
    "A shell command that needs approval; Esc at the approval; then /quit.",
    lambda: [Reply(parts=[shell("echo hi > made.txt")])],
)
def approval_esc(s: GeminiSession, api: FakeGemini) -> None:
    s.ready()
    s.prompt("make a file")
    s.capture.wait_hook("Notification", 60, notification_type="ToolPermission")
    s.answer_dialog("Escape")
    s.capture.wait_transcript(_cancelled, 60, what=CANCELLED)
    s.tmux.wait_screen(r"Type your message", 60)
    _quit(s)


@scenario(
    "A shell command that needs approval, answered '3. No, suggest changes'; then /quit.",
    lambda: [Reply(parts=[shell("echo hi > made.txt")])],
)
def approval_no(s: GeminiSession, api: FakeGemini) -> None:
    s.ready()
    s.prompt("make a file")
    s.capture.wait_hook("Notification", 60, notification_type="ToolPermission")
    s.answer_dialog("3")
    s.tmux.wait_screen(r"Type your message", 60)
    time.sleep(1.0)  # what follows the refusal, if anything, lands before /quit
    _quit(s)


_held = threading.Event()


@scenario(
    "Esc while gemini waits for the model (the answer held until after the Esc); then /quit.",
    lambda: [say("Too late.", hold=_held)],
)
def esc_while_waiting(s: GeminiSession, api: FakeGemini) -> None:
    _held.clear()
    s.ready()
    s.prompt("say hello")
    api.wait_requests(1, 60)
    s.capture.wait_hook("BeforeModel", 60)
    s.key("Escape")
    s.capture.wait_transcript(_cancelled, 60, what=CANCELLED)
    _held.set()  # the answer comes after the Esc: gemini has given up on it
    s.tmux.wait_screen(r"Type your message", 60)
    _quit(s)


_held_first = threading.Event()


@scenario(
    "A second prompt typed while the first waits for the model (held); both answered; /quit.",
    lambda: [
        say("First answer.", hold=_held_first, match="first question"),
        say("Second answer.", match="second question"),
    ],
)
def prompt_while_waiting(s: GeminiSession, api: FakeGemini) -> None:
    _held_first.clear()
    s.ready()
    s.prompt("first question")
    api.wait_requests(1, 60)
    s.capture.act("type 'second question'")
    s.tmux.type("second question")
    s.tmux.wait_screen("second question")
    time.sleep(0.5)  # an Enter sooner is taken as part of a paste (gemini_driver)
    s.key("Enter")
    time.sleep(1.0)  # the queued prompt is on screen before the first answer comes
    _held_first.set()
    s.capture.wait_hook("AfterAgent", 60, prompt="second question")
    _quit(s)


@scenario("gemini starts, /quit at once.", list)
def quit_at_once(s: GeminiSession, api: FakeGemini) -> None:
    s.ready()
    _quit(s)


def record(name: str, out: Path | None, *, root: Path) -> Capture:
    """Run one scenario; write its recording to ``out`` (with ``.keys.json`` beside)."""
    sc = SCENARIOS[name]
    api = FakeGemini(sc.replies())
    with api.serve():
        if sc.drive is None:
            run = run_print(root, sc.prompt, base_url=api.base_url, args=("-o", "text", *sc.args))
            if run.returncode != 0:
                raise RuntimeError(f"gemini -p exited {run.returncode}: {run.stderr[-500:]}")
            cap = run.capture
        else:
            with interactive(root, base_url=api.base_url, args=sc.args) as s:
                try:
                    sc.drive(s, api)
                except Exception:
                    print(s.tmux.screen(), file=sys.stderr)
                    raise
                cap = s.capture
    if api.pending:
        print(f"note {name}: {api.pending} scripted replies left unused", file=sys.stderr)
    if out is not None:
        recorded = Capture(None)
        recorded.entries = [(t, CAPTURED[source], msg) for t, source, msg in cap.entries]
        recorded.actions, recorded.end_at = cap.actions, cap.end_at
        write_recording(recorded, out, None)
    return cap


def describe(cap: Capture) -> str:
    """One line per entry and action, on the capture's clock."""
    rows: list[tuple[float, str]] = [(t, f"  key  {what}") for t, what in cap.actions]
    for t, source, msg in cap.entries:
        if source == "hook":
            what = str(msg.get("hook_event_name"))
            extra = msg.get("notification_type") or msg.get("reason") or msg.get("source")
        else:
            what = f"chat {msg.get('type') or next(iter(msg), '?')}"
            content = msg.get("content")
            extra = content[:60] if isinstance(content, str) else None
        rows.append((t, f"{source[:5]:5}  {what}" + (f"  {extra}" if extra else "")))
    return "\n".join(f"{t:8.3f} {row}" for t, row in sorted(rows, key=lambda r: r[0]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {sorted(SCENARIOS)}")
    parser.add_argument("--show", action="store_true", help="print each capture")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    scratch = Path(tempfile.gettempdir()) / "codex-presence-gemini"
    failed = 0
    for name in args.names or sorted(SCENARIOS):
        try:
            cap = record(name, args.out / f"{name}.jsonl", root=scratch / name)
        except Exception as exc:  # report every scenario, then fail
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        print(f"{name}: {len(cap.entries)} entries")
        if args.show:
            print(describe(cap))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
