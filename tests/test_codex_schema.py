"""The schema reader (``codex_presence/core/codex/schema.py``, under ``doctor``) reads the
protocol sets of every codex version with fixtures, and the mapping classifies all of them.

The live test generates the schema with the real binary (both with and without
``--experimental``) and checks the sets read against the ones written down below from
that version's schema; the rest check the reader on small hand-made schemas.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from codex_presence.core.codex.schema import (
    BUNDLE_FILE,
    MAPPING,
    SCHEMA_FILES,
    ProtocolSets,
    SchemaDrift,
    read_bundle,
    read_schema,
    stale,
    unclassified,
)


def read_schema_dir(directory: Path) -> ProtocolSets:
    """What ``doctor`` does: the reader's files, parsed, by their relative path."""
    return read_schema(
        {
            name: orjson.loads((directory / name).read_bytes())
            for name in SCHEMA_FILES
            if (directory / name).is_file()
        }
    )


_REQUESTS = frozenset(
    {
        "item/commandExecution/requestApproval",
        "item/fileChange/requestApproval",
        "item/tool/requestUserInput",
        "mcpServer/elicitation/request",
        "item/permissions/requestApproval",
        "item/tool/call",
        "account/chatgptAuthTokens/refresh",
        "attestation/generate",
        "applyPatchApproval",
        "execCommandApproval",
    }
)
_ITEMS = frozenset(
    {
        "userMessage",
        "hookPrompt",
        "agentMessage",
        "functionCallOutput",
        "plan",
        "reasoning",
        "commandExecution",
        "fileChange",
        "mcpToolCall",
        "dynamicToolCall",
        "collabAgentToolCall",
        "subAgentActivity",
        "webSearch",
        "imageView",
        "sleep",
        "imageGeneration",
        "enteredReviewMode",
        "exitedReviewMode",
        "contextCompaction",
    }
)
_STATUSES = frozenset({"notLoaded", "idle", "systemError", "active"})
_FLAGS = frozenset({"waitingOnApproval", "waitingOnUserInput"})

SETS: dict[tuple[str, bool], ProtocolSets] = {
    # (version, --experimental): read from that version's generated schema.
    ("0.169.0", False): ProtocolSets(_REQUESTS, _ITEMS, _STATUSES, _FLAGS),
    ("0.169.0", True): ProtocolSets(_REQUESTS | {"currentTime/read"}, _ITEMS, _STATUSES, _FLAGS),
    ("0.171.0", False): ProtocolSets(_REQUESTS, _ITEMS, _STATUSES, _FLAGS),
    ("0.171.0", True): ProtocolSets(_REQUESTS, _ITEMS, _STATUSES, _FLAGS),
}


@pytest.mark.codex
@pytest.mark.parametrize("experimental", [False, True], ids=["stable", "experimental"])
def test_the_probe_reads_each_versions_schema_and_the_mapping_knows_it_all(
    codex: Path, codex_version: str, experimental: bool, tmp_path: Path
) -> None:
    out = tmp_path / "schema"
    command = [str(codex), "app-server", "generate-json-schema", "--out", str(out)]
    subprocess.run(
        command + (["--experimental"] if experimental else []),
        check=True,
        capture_output=True,
        timeout=60,
    )
    sets = read_schema_dir(out)
    assert read_bundle(orjson.loads((out / BUNDLE_FILE).read_bytes())) == sets
    assert (codex_version, experimental) in SETS, "read this version's schema and write it down"
    assert sets == SETS[(codex_version, experimental)]
    assert unclassified(sets, MAPPING) == {}


def test_the_mapping_knows_more_than_0_171_0_sends() -> None:
    """currentTime/read left the (experimental) schema in 0.171.0; keeping it costs nothing."""
    assert stale(SETS[("0.171.0", True)], MAPPING) == {
        "server_requests": frozenset({"currentTime/read"})
    }
    assert stale(SETS[("0.169.0", True)], MAPPING) == {}


# -- the reader on hand-made schemas --------------------------------------------------------


def _write(directory: Path, name: str, doc: dict[str, Any]) -> None:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(doc))


def _variant(tag: str, value: str, *, const: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"const": value} if const else {"enum": [value]}
    return {"type": "object", "properties": {tag: {"type": "string", **spec}}}


def _schema(
    directory: Path,
    *,
    requests: list[dict[str, Any]],
    items: dict[str, Any],
    flags: dict[str, Any] | None = None,
) -> Path:
    _write(directory, "ServerRequest.json", {"oneOf": requests, "definitions": {}})
    _write(
        directory,
        "v2/ItemStartedNotification.json",
        {"properties": {"item": {"$ref": "#/definitions/ThreadItem"}}, "definitions": items},
    )
    statuses = {
        "ThreadStatus": {"oneOf": [_variant("type", "idle"), _variant("type", "active")]},
        "ThreadActiveFlag": flags or {"enum": ["waitingOnApproval"]},
        "Flags": {"enum": ["waitingOnApproval"]},
    }
    _write(directory, "v2/ThreadStatusChangedNotification.json", {"definitions": statuses})
    return directory


def test_refs_anyof_and_const_read_like_inline_oneof_and_enum(tmp_path: Path) -> None:
    items = {
        "ThreadItem": {"$ref": "#/definitions/Items"},
        "Items": {"anyOf": [{"$ref": "#/definitions/Tool"}, _variant("type", "plan")]},
        "Tool": {"properties": {"type": {"$ref": "#/definitions/ToolType"}}},
        "ToolType": {"const": "commandExecution"},
    }
    directory = _schema(
        tmp_path,
        requests=[_variant("method", "a/b"), _variant("method", "c/d", const=True)],
        items=items,
        flags={"$ref": "#/definitions/Flags"},
    )
    sets = read_schema_dir(directory)
    assert sets == ProtocolSets(
        server_requests=frozenset({"a/b", "c/d"}),
        item_types=frozenset({"commandExecution", "plan"}),
        thread_statuses=frozenset({"idle", "active"}),
        active_flags=frozenset({"waitingOnApproval"}),
    )
    assert unclassified(sets, MAPPING) == {"server_requests": frozenset({"a/b", "c/d"})}


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param({"properties": {}}, id="a variant without the discriminator"),
        pytest.param({"properties": {"type": {"type": "string"}}}, id="a free string"),
        pytest.param({"properties": {"type": {"enum": [1]}}}, id="a number enum"),
        pytest.param({"$ref": "#/definitions/Nowhere"}, id="a dangling ref"),
        pytest.param({"$ref": "https://example.invalid/x.json"}, id="a remote ref"),
    ],
)
def test_a_variant_it_cannot_read_is_an_error_not_a_smaller_set(
    tmp_path: Path, broken: dict[str, Any]
) -> None:
    items = {"ThreadItem": {"oneOf": [_variant("type", "plan"), broken]}}
    directory = _schema(tmp_path, requests=[_variant("method", "a/b")], items=items)
    with pytest.raises(SchemaDrift, match="ItemStartedNotification"):
        read_schema_dir(directory)


def test_a_missing_file_or_definition_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SchemaDrift, match="no such file"):
        read_schema_dir(tmp_path)
    directory = _schema(tmp_path, requests=[_variant("method", "a/b")], items={})
    with pytest.raises(SchemaDrift, match="ThreadItem"):
        read_schema_dir(directory)
