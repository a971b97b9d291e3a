"""What a codex version can send, read from its JSON schema, against what the mapping knows.

``codex app-server generate-json-schema [--experimental] --out DIR`` writes the protocol as
JSON Schema files. This module reads, from those files already parsed (pure: no file, no
process; ``codex-presence doctor`` does the I/O), the four sets the codex mapping
classifies, and says what it does not classify. Where the sets are (the same paths in codex
0.169.0 and 0.171.0, with and without ``--experimental``):

- server→client request methods: ``ServerRequest.json``, ``oneOf[*].properties.method.enum``;
- thread item types (``ThreadItem``'s discriminator): ``v2/ItemStartedNotification.json``,
  ``definitions.ThreadItem.oneOf[*].properties.type.enum``;
- thread status types: ``v2/ThreadStatusChangedNotification.json``,
  ``definitions.ThreadStatus.oneOf[*].properties.type.enum``;
- ``activeFlags`` values: the same file, ``definitions.ThreadActiveFlag.enum``.

The one-file bundle ``codex_app_server_protocol.schemas.json`` holds the same under
``definitions.ServerRequest`` and ``definitions.v2.{ThreadItem,ThreadStatus,ThreadActiveFlag}``
(:func:`read_bundle`, a cross-check); the per-message files are the default because they
are the messages the mapping reads. A variant whose discriminator cannot be read is an
error (:class:`SchemaDrift`), never a silently smaller set: a doctor that misses a new
request type would say "all classified" when it is not.

Tolerated on the way, as JSON-Schema generators write the same thing differently: ``anyOf``
for ``oneOf``, ``const`` for a one-value ``enum``, and local ``$ref``\\ s (``#/definitions/…``)
anywhere a variant or discriminator is expected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from codex_presence.core.codex.protocol import (
    ACTIVE_STATUS,
    AUTOMATIC_REQUESTS,
    BLOCKING_REQUESTS,
    OTHER_FLAGS,
    PASSIVE_ITEM_TYPES,
    THREAD_ENDING_STATUSES,
    TOOL_ITEM_TYPES,
    WAITING_FLAGS,
)

__all__ = [
    "BUNDLE_FILE",
    "MAPPING",
    "SCHEMA_FILES",
    "Classification",
    "ProtocolSets",
    "SchemaDrift",
    "read_bundle",
    "read_schema",
    "stale",
    "unclassified",
]

SERVER_REQUEST_FILE = "ServerRequest.json"
THREAD_ITEM_FILE = "v2/ItemStartedNotification.json"
STATUS_FILE = "v2/ThreadStatusChangedNotification.json"
SCHEMA_FILES = (SERVER_REQUEST_FILE, THREAD_ITEM_FILE, STATUS_FILE)
"""The files :func:`read_schema` reads, relative to the output directory."""
BUNDLE_FILE = "codex_app_server_protocol.schemas.json"


class SchemaDrift(ValueError):
    """The schema is not shaped the way this reader expects: say so, never guess."""


@dataclass(frozen=True)
class ProtocolSets:
    """What one codex version's schema says can arrive."""

    server_requests: frozenset[str]
    item_types: frozenset[str]
    thread_statuses: frozenset[str]
    active_flags: frozenset[str]


@dataclass(frozen=True)
class Classification:
    """What the mapping knows, set by set, and how it reads each name."""

    blocking_requests: frozenset[str]
    automatic_requests: frozenset[str]
    tool_item_types: frozenset[str]
    passive_item_types: frozenset[str]
    ending_statuses: frozenset[str]
    other_statuses: frozenset[str]
    waiting_flags: frozenset[str]
    other_flags: frozenset[str]

    def known(self) -> ProtocolSets:
        return ProtocolSets(
            server_requests=self.blocking_requests | self.automatic_requests,
            item_types=self.tool_item_types | self.passive_item_types,
            thread_statuses=self.ending_statuses | self.other_statuses,
            active_flags=self.waiting_flags | self.other_flags,
        )


MAPPING = Classification(
    blocking_requests=BLOCKING_REQUESTS,
    automatic_requests=AUTOMATIC_REQUESTS,
    tool_item_types=TOOL_ITEM_TYPES,
    passive_item_types=PASSIVE_ITEM_TYPES,
    ending_statuses=THREAD_ENDING_STATUSES,
    other_statuses=frozenset({ACTIVE_STATUS}),
    waiting_flags=WAITING_FLAGS,
    other_flags=OTHER_FLAGS,
)
"""The codex mapping's classification (:mod:`codex_presence.core.codex.protocol`)."""


def unclassified(
    sets: ProtocolSets, classification: Classification = MAPPING
) -> dict[str, frozenset[str]]:
    """What the schema has and the mapping does not classify, per set (empty sets left out)."""
    return _difference(sets, classification.known())


def stale(
    sets: ProtocolSets, classification: Classification = MAPPING
) -> dict[str, frozenset[str]]:
    """What the mapping classifies and the schema no longer has, per set (harmless)."""
    return _difference(classification.known(), sets)


def _difference(a: ProtocolSets, b: ProtocolSets) -> dict[str, frozenset[str]]:
    out = {f.name: getattr(a, f.name) - getattr(b, f.name) for f in fields(ProtocolSets)}
    return {name: values for name, values in out.items() if values}


# -- reading -------------------------------------------------------------------------------


def read_schema(documents: Mapping[str, object]) -> ProtocolSets:
    """The four sets from the per-message files of a ``generate-json-schema`` output,
    parsed, by their path relative to it (:data:`SCHEMA_FILES`)."""
    requests = _document(documents, SERVER_REQUEST_FILE)
    items = _document(documents, THREAD_ITEM_FILE)
    statuses = _document(documents, STATUS_FILE)
    return ProtocolSets(
        server_requests=_tags(requests, requests, "method", SERVER_REQUEST_FILE),
        item_types=_tags(
            _definition(items, "ThreadItem", THREAD_ITEM_FILE), items, "type", THREAD_ITEM_FILE
        ),
        thread_statuses=_tags(
            _definition(statuses, "ThreadStatus", STATUS_FILE), statuses, "type", STATUS_FILE
        ),
        active_flags=_enum(
            _definition(statuses, "ThreadActiveFlag", STATUS_FILE), statuses, STATUS_FILE
        ),
    )


def read_bundle(bundle: object) -> ProtocolSets:
    """The four sets from the one-file bundle (:data:`BUNDLE_FILE`), parsed."""
    where = BUNDLE_FILE
    root = _document({where: bundle}, where)
    v2 = _resolve(_definition(root, "v2", where), root, where)
    return ProtocolSets(
        server_requests=_tags(_definition(root, "ServerRequest", where), root, "method", where),
        item_types=_tags(_member(v2, "ThreadItem", where), root, "type", where),
        thread_statuses=_tags(_member(v2, "ThreadStatus", where), root, "type", where),
        active_flags=_enum(_member(v2, "ThreadActiveFlag", where), root, where),
    )


def _document(documents: Mapping[str, object], name: str) -> Mapping[str, Any]:
    if name not in documents:
        raise SchemaDrift(f"{name}: no such file; did codex move its schema?")
    doc = documents[name]
    if not isinstance(doc, dict):
        raise SchemaDrift(f"{name}: not a JSON object")
    return doc


def _member(node: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    value = node.get(name)
    if not isinstance(value, dict):
        raise SchemaDrift(f"{where}: no object {name!r}")
    return value


def _definition(root: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    definitions = root.get("definitions", root.get("$defs"))
    if not isinstance(definitions, dict):
        raise SchemaDrift(f"{where}: no definitions")
    return _member(definitions, name, f"{where}: definitions")


def _resolve(node: Any, root: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """Follow local ``$ref``\\ s (``#/a/b``) until an object that is not one."""
    seen: set[str] = set()
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        ref: str = node["$ref"]
        if not ref.startswith("#/") or ref in seen:
            raise SchemaDrift(f"{where}: cannot follow $ref {ref!r}")
        seen.add(ref)
        node = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise SchemaDrift(f"{where}: $ref {ref!r} leads nowhere")
            node = node[part]
    if not isinstance(node, dict):
        raise SchemaDrift(f"{where}: expected an object, found {type(node).__name__}")
    return node


def _variants(union: Mapping[str, Any], root: Mapping[str, Any], where: str) -> list[Any]:
    union = _resolve(union, root, where)
    variants = union.get("oneOf", union.get("anyOf"))
    if not isinstance(variants, list) or not variants:
        raise SchemaDrift(f"{where}: not a oneOf/anyOf union")
    return variants


def _values(node: Mapping[str, Any], where: str) -> Iterable[str]:
    values: Any = [node["const"]] if "const" in node else node.get("enum")
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise SchemaDrift(f"{where}: no string enum or const")
    return values


def _enum(node: Mapping[str, Any], root: Mapping[str, Any], where: str) -> frozenset[str]:
    return frozenset(_values(_resolve(node, root, where), where))


def _tags(
    union: Mapping[str, Any], root: Mapping[str, Any], tag: str, where: str
) -> frozenset[str]:
    """Every value of the discriminator ``tag`` over the union's variants."""
    out: set[str] = set()
    for number, raw in enumerate(_variants(union, root, where)):
        variant = _resolve(raw, root, where)
        title = variant.get("title", f"variant {number}")
        properties = variant.get("properties")
        if not isinstance(properties, dict) or tag not in properties:
            raise SchemaDrift(f"{where}: {title} has no {tag!r} property")
        out.update(_values(_resolve(properties[tag], root, where), f"{where}: {title}.{tag}"))
    return frozenset(out)
