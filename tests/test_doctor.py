"""``codex-presence doctor``, the real command against the real codex binaries: it passes on
every version with fixtures, and fails, naming the name, on a schema edited to hold a
server request method (or item type) the mapping does not classify."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DOCTOR = [sys.executable, "-m", "codex_presence", "doctor"]

# A codex that is the real one, except that the schema it writes has one more server
# request and one more item type: what a new codex release could bring.
EDITING_CODEX = """\
#!{python}
import subprocess, sys
from pathlib import Path
import orjson

status = subprocess.run([{real!r}, *sys.argv[1:]]).returncode
if status == 0 and "generate-json-schema" in sys.argv:
    out = Path(sys.argv[sys.argv.index("--out") + 1])
    path = out / "ServerRequest.json"
    doc = orjson.loads(path.read_bytes())
    doc["oneOf"].append({{
        "title": "NewApprovalRequest",
        "type": "object",
        "properties": {{"method": {{"type": "string", "enum": [{method!r}]}}}},
    }})
    path.write_bytes(orjson.dumps(doc))
    path = out / "v2" / "ItemStartedNotification.json"
    doc = orjson.loads(path.read_bytes())
    doc["definitions"]["ThreadItem"]["oneOf"].append({{
        "type": "object",
        "properties": {{"type": {{"type": "string", "enum": ["teleport"]}}}},
    }})
    path.write_bytes(orjson.dumps(doc))
sys.exit(status)
"""


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DOCTOR, *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


def script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.mark.codex
def test_doctor_passes_on_the_real_codex(codex: Path, codex_version: str) -> None:
    done = doctor("--codex", str(codex))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"codex-cli {codex_version}" in done.stdout
    assert "server request methods:" in done.stdout and "thread item types:" in done.stdout
    assert "all classified" in done.stdout and "ok:" in done.stdout
    assert done.stderr == ""


@pytest.mark.codex
def test_doctor_fails_on_a_schema_with_a_new_request_and_names_it(
    codex: Path, tmp_path: Path
) -> None:
    method = "item/teleport/requestApproval"
    fake = script(
        tmp_path / "codex",
        EDITING_CODEX.format(python=sys.executable, real=str(codex), method=method),
    )
    # From the environment, as every option can be given.
    done = doctor(env={**os.environ, "CODEX_PRESENCE_CODEX": str(fake)})
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert f"    {method}" in lines
    assert "    teleport" in lines
    assert any("1 neither blocking nor automatic" in line for line in lines)
    assert any("1 neither tool nor passive" in line for line in lines)
    assert "2 name(s) unclassified" in done.stdout


def test_doctor_without_a_codex_says_so_and_exits_2(tmp_path: Path) -> None:
    done = doctor("--codex", str(tmp_path / "no-such-codex"))
    assert done.returncode == 2
    assert "no codex at" in done.stderr and done.stdout == ""


def test_doctor_names_a_codex_that_is_not_executable(tmp_path: Path) -> None:
    codex = tmp_path / "codex"
    codex.write_text("#!/bin/sh\n")
    done = doctor("--codex", str(codex))
    assert done.returncode == 2
    assert f"{codex} is not executable" in done.stderr and done.stdout == ""


def test_doctor_gives_up_on_a_codex_that_hangs(tmp_path: Path) -> None:
    # Not exec: the sleep is a grandchild holding the pipes, as under npm's launcher.
    hanging = script(tmp_path / "codex", "#!/bin/sh\nsleep 60\necho late\n")
    done = doctor("--codex", str(hanging), "--timeout", "0.5")
    assert done.returncode == 2
    assert "took more than 0.5 s" in done.stderr


def test_doctor_reports_a_failing_codex_with_its_last_words(tmp_path: Path) -> None:
    failing = script(
        tmp_path / "codex",
        '#!/bin/sh\n[ "$1" = --version ] && { echo "codex-cli 9.9.9"; exit 0; }\n'
        'echo "error: unrecognized subcommand" >&2\nexit 2\n',
    )
    done = doctor("--codex", str(failing))
    assert done.returncode == 2
    assert "exited with status 2: error: unrecognized subcommand" in done.stderr


def test_doctor_on_a_schema_without_its_files_is_an_error_not_a_pass(tmp_path: Path) -> None:
    partial = script(  # one file of the schema, not the others
        tmp_path / "codex",
        '#!/bin/sh\n[ "$1" = app-server ] && echo {} > "$5/ServerNotification.json"\nexit 0\n',
    )
    done = doctor("--codex", str(partial))
    assert done.returncode == 2
    assert "ServerRequest.json: no such file" in done.stderr


def test_doctor_asks_whether_a_program_that_writes_no_schema_is_codex(tmp_path: Path) -> None:
    done = doctor("--codex", "true")  # exits 0 to everything, and writes nothing
    assert done.returncode == 2
    assert "wrote no schema at all: is it codex?" in done.stderr, done.stderr


def test_doctor_help_explains_the_sets_and_the_exit_status() -> None:
    done = subprocess.run([*DOCTOR, "--help"], capture_output=True, text=True, check=True)
    for words in ("--codex PATH", "--timeout", "blocking", "passive", "Exit status"):
        assert words in done.stdout
