"""The team file: reading, checking and writing it, and the development team.

The file is TOML (read with :mod:`tomllib`, written by hand) and its shape is fixed by the
design::

    team = "acme"

    [[members]]
    name = "alice"
    role = { title = "director", permissions = ["members.manage", "objectives.create"] }
    token_sha256 = "<hex sha256 of alice's token>"   # or token = "..." for development

Every key is checked, and a bad file is refused with a message naming the member and the
key; an unknown key too (a typo'd ``permisions`` would otherwise silently cost a member
their privileges), with the closest known one. Text that is shown (the team's
name, role titles, permissions) may not hold control characters: escape sequences and line
breaks there would reach every roster, terminal and log that shows it. A plain ``token`` is
accepted for development with a warning, because whoever can read the file can then act as
that member. Files are written with mode 0600. ``broker`` without ``--team`` uses
:func:`dev_team`.
"""

from __future__ import annotations

import difflib
import getpass
import logging
import os
import re
import stat
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codex_presence._wire import (
    ADMIN_PERMISSION,
    OPERATOR_PERMISSION,
    control_character,
    is_token_text,
)
from codex_presence.broker.team import Member, Role, Team, TeamError, hash_token, new_token

__all__ = [
    "DevTeam",
    "dev_team",
    "load_team",
    "parse_member_spec",
    "parse_team",
    "private_directory",
    "read_own_team_file",
    "read_team_file",
    "refuse_control_characters",
    "render_team",
    "render_team_data",
    "state_dir",
    "write_team",
]

logger = logging.getLogger("codex_presence.team")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")

_TEAM_KEYS = ("team", "members", "notify")
"""The file's top-level keys (``[[notify]]``: the notifications' section, read apart)."""
_MEMBER_KEYS = ("name", "role", "token_sha256", "token")
_ROLE_KEYS = ("title", "permissions")


# -- reading -------------------------------------------------------------------------------


def load_team(path: str | os.PathLike[str]) -> Team:
    """Read and validate a team file."""
    return parse_team(read_team_file(path), source=str(path))


def read_team_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed TOML of a team file, unchecked (:class:`TeamError` if it cannot be read):
    what :func:`parse_team` checks, and other sections (``[[notify]]``) are read from."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise TeamError(f"{path}: no such team file") from None
    except OSError as exc:  # a directory, no permission, an I/O error
        raise TeamError(f"{path}: cannot read the team file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TeamError(f"{path}: not valid TOML: the file is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise TeamError(f"{path}: not valid TOML: {exc}") from None
    return data


def parse_team(data: Mapping[str, Any], *, source: str = "team file") -> Team:
    """Validate the parsed TOML of a team file."""
    _refuse_unknown_keys(data, _TEAM_KEYS, source)
    name = data.get("team")
    if not isinstance(name, str) or not name.strip():
        raise TeamError(f"{source}: 'team' must be a non-empty string")
    refuse_control_characters(name, f"{source}: 'team'")
    raw_members = data.get("members", [])
    if not isinstance(raw_members, list):
        raise TeamError(f"{source}: 'members' must be an array of tables ([[members]])")
    members = [_parse_member(raw, index, source) for index, raw in enumerate(raw_members)]
    if not members:
        raise TeamError(f"{source}: the team has no members")
    try:
        return Team(name=name, members=tuple(members))
    except TeamError as exc:
        raise TeamError(f"{source}: {exc}") from None


def _parse_member(raw: object, index: int, source: str) -> Member:
    where = f"{source}: members[{index}]"
    if not isinstance(raw, dict):
        raise TeamError(f"{where} must be a table")
    name = raw.get("name")
    named = isinstance(name, str) and _NAME.match(name)
    _refuse_unknown_keys(
        raw,
        _MEMBER_KEYS,
        f"{source}: member {name!r}" if named else where,
        inner=("role", _ROLE_KEYS),
    )
    if not isinstance(name, str) or not _NAME.match(name):
        raise TeamError(
            f"{where}: 'name' must be 1-64 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit (got {name!r})"
        )
    where = f"{source}: member {name!r}"
    role = _parse_role(raw.get("role"), where)
    has_hash = "token_sha256" in raw
    has_plain = "token" in raw
    if has_hash == has_plain:
        raise TeamError(f"{where} needs exactly one of 'token_sha256' or 'token'")
    if has_hash:
        hexdigest = raw["token_sha256"]
        if not isinstance(hexdigest, str) or not _HEX64.match(hexdigest.lower()):
            raise TeamError(f"{where}: 'token_sha256' must be 64 hex digits")
        digest = bytes.fromhex(hexdigest)
    else:
        token = raw["token"]
        if not isinstance(token, str) or not is_token_text(token):
            raise TeamError(f"{where}: 'token' must be a non-empty string without whitespace")
        logger.warning(
            "%s has a plain 'token': fine for development, but anyone who can read the "
            "file can act as %s; use token_sha256 (codex-presence team init) for real teams",
            where,
            name,
        )
        digest = hash_token(token)
    return Member(name=name, role=role, token_digest=digest)


def _parse_role(raw: object, where: str) -> Role | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TeamError(f"{where}: 'role' must be an inline table {{ title = ..., ... }}")
    _refuse_unknown_keys(raw, _ROLE_KEYS, f"{where}: role")
    title = raw.get("title")
    if not isinstance(title, str):
        raise TeamError(f"{where}: role 'title' must be a string")
    permissions = raw.get("permissions", [])
    if not isinstance(permissions, list) or not all(isinstance(p, str) for p in permissions):
        raise TeamError(f"{where}: role 'permissions' must be an array of strings")
    return _checked_role(Role(title=title, permissions=tuple(permissions)), where)


def _refuse_unknown_keys(
    table: Mapping[str, Any],
    known: Sequence[str],
    where: str,
    *,
    inner: tuple[str, Sequence[str]] | None = None,
) -> None:
    """:class:`TeamError` naming the first key of ``table`` that is not ``known``, and the
    closest known one (also among the keys of the ``inner`` table, which a key may have
    been meant for: ``permissions`` belongs in the role)."""
    for key in table:
        if key in known:
            continue
        candidates = {k: repr(k) for k in known}
        if inner is not None:
            table_name, inner_keys = inner
            for k in inner_keys:
                candidates.setdefault(k, f"{k!r} (in {table_name} = {{ ... }})")
        listed = ", ".join(known)
        close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
        if close:
            message = f"did you mean {candidates[close[0]]}? Known here: {listed}"
        else:
            (closest,) = difflib.get_close_matches(key, candidates, n=1, cutoff=0.0)
            message = f"known here: {listed}; the closest is {candidates[closest]}"
        raise TeamError(f"{where}: unknown key {key!r}: {message}")


def _checked_role(role: Role, where: str) -> Role:
    refuse_control_characters(role.title, f"{where}: role 'title'")
    for permission in role.permissions:
        refuse_control_characters(permission, f"{where}: role 'permissions'")
    return role


def refuse_control_characters(text: str, what: str) -> None:
    """:class:`TeamError` if ``text``, which rosters, terminals and logs will show, holds a
    character they would act on; ``what`` names it in the message."""
    found = control_character(text)
    if found is not None:
        raise TeamError(
            f"{what} holds a control character (U+{ord(found):04X}) at position "
            f"{text.index(found) + 1}: escape sequences, line breaks and direction "
            "overrides are refused"
        )


# -- writing -------------------------------------------------------------------------------


def parse_member_spec(spec: str) -> tuple[str, Role | None]:
    """``NAME[:TITLE[:perm,perm]]`` as ``team init --member`` takes it."""
    name, _, rest = spec.partition(":")
    if not _NAME.match(name):
        raise TeamError(
            f"--member {spec!r}: the name must be 1-64 letters, digits, '.', '_' or '-'"
        )
    if not rest and ":" not in spec:
        return name, None
    title, _, perms = rest.partition(":")
    if ":" in perms:
        raise TeamError(
            f"--member {spec!r}: too many ':' — it is NAME:TITLE:PERMISSIONS, the permissions "
            "separated by commas (no permission holds a ':')"
        )
    permissions = tuple(p.strip() for p in perms.split(",") if p.strip())
    return name, _checked_role(Role(title=title, permissions=permissions), f"--member {name}")


def _toml_string(value: str) -> str:
    """A TOML basic string. tomllib only reads, and the subset we write is tiny."""
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def render_team(
    team_name: str, members: Sequence[tuple[str, Role | None, str]], *, plain: bool = False
) -> str:
    """The TOML text of a team file. ``members`` holds (name, role, token) triples; the
    file gets the token's sha256, or the token itself when ``plain`` (development)."""
    tables: list[dict[str, Any]] = []
    for name, role, token in members:
        table: dict[str, Any] = {"name": name}
        if role is not None:
            table["role"] = {"title": role.title, "permissions": list(role.permissions)}
        table["token" if plain else "token_sha256"] = token if plain else hash_token(token).hex()
        tables.append(table)
    return render_team_data({"team": team_name, "members": tables})


def render_team_data(data: Mapping[str, Any]) -> str:
    """The TOML text of a team file's parsed data (what :func:`read_team_file` returns,
    checked by :func:`parse_team`): ``team``, its ``[[members]]`` and its ``[[notify]]``
    tables, so that ``team add``, ``remove`` and ``rotate`` keep what they do not change.
    The file's comments are not kept."""
    lines = [
        "# codex-presence team file (docs/broker.md#the-team-file). Tokens are stored as",
        "# sha256; each token was printed once, when it was made (team init, add, rotate).",
        f"team = {_toml_string(data['team'])}",
    ]
    for section in ("members", "notify"):
        for table in data.get(section, []):
            lines.append("")
            lines.append(f"[[{section}]]")
            lines.extend(f"{key} = {_toml_value(value)}" for key, value in table.items())
    return "\n".join(lines) + "\n"


def _toml_value(value: object) -> str:
    """A TOML value of the kinds a team file holds: strings, numbers, booleans, arrays of
    them, and inline tables (a member's role)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }"
    raise TeamError(f"a value the team file cannot hold: {type(value).__name__}")


def read_own_team_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """:func:`read_team_file` for a file we are about to rewrite: a regular file of ours
    (not a link, not another user's), whose content is a valid team."""
    path = Path(path)
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise TeamError(f"{path}: no such team file (team init makes one)") from None
    if not stat.S_ISREG(info.st_mode):
        raise TeamError(f"{path} is not a regular file: refusing to rewrite it")
    if info.st_uid != os.getuid():
        raise TeamError(
            f"{path} belongs to another user (uid {info.st_uid}): refusing to rewrite it"
        )
    data = read_team_file(path)
    parse_team(data, source=str(path))
    return data


def write_team(path: str | os.PathLike[str], text: str, *, force: bool = False) -> None:
    """Write a team (or token) file with mode 0600; refuse to replace one unless ``force``."""
    path = Path(path)
    data = text.encode("utf-8")
    if not force:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise TeamError(f"{path} already exists (use --force to replace it)") from None
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, data)
        finally:
            os.close(fd)
        return
    # Replace atomically so that a reader never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.close(fd)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- the development team ------------------------------------------------------------------


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/codex-presence``, or ``~/.local/state/codex-presence``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "codex-presence"


@dataclass(frozen=True, slots=True)
class DevTeam:
    """Where ``broker`` without ``--team`` keeps its team and the one member's token."""

    team_path: Path
    token_path: Path
    member: str
    created: bool


def dev_team(directory: Path | None = None, *, member: str | None = None) -> DevTeam:
    """Reuse or make the development team: one member (the user), token in a 0600 file,
    in a directory only the user can write to (see :func:`private_directory`)."""
    directory = state_dir() if directory is None else directory
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise TeamError(f"cannot make the state directory {directory}: {exc}") from None
    trusted = private_directory(directory)
    team_path = directory / "dev-team.toml"
    token_path = directory / "dev-token"
    if trusted and _ours(team_path) and _ours(token_path):
        token = token_path.read_text(encoding="utf-8").strip()
        team = load_team(team_path)
        found = team.authenticate(token)
        if found is not None:
            return DevTeam(team_path, token_path, found.name, created=False)
        logger.warning("%s does not match %s; making a new development team", token_path, team_path)
    name = member or _user_name()
    token = new_token()
    write_team(token_path, token + "\n", force=True)
    text = render_team(
        "dev",
        [(name, Role("developer", (ADMIN_PERMISSION, OPERATOR_PERMISSION)), token)],
    )
    write_team(team_path, text, force=True)
    return DevTeam(team_path, token_path, name, created=True)


def private_directory(directory: Path) -> bool:
    """Make sure only we can write to ``directory``: refuse (:class:`TeamError`) one that
    another user owns; take write access away from group and others, with a warning, where
    they had it. Returns False then: whatever is in it may have been put there by someone
    else, and must not be trusted."""
    info = directory.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise TeamError(f"{directory} is not a directory")
    if info.st_uid != os.getuid():
        raise TeamError(
            f"{directory} belongs to another user (uid {info.st_uid}): a team and a token "
            "kept there would be theirs to change; remove it, or set XDG_STATE_HOME"
        )
    mode = stat.S_IMODE(info.st_mode)
    if not mode & 0o022:
        return True
    directory.chmod(0o700)
    logger.warning(
        "%s was writable by others (mode %04o): made it 0700, and will not trust what is in it",
        directory,
        mode,
    )
    return False


def _ours(path: Path) -> bool:
    """A regular file of ours (not a link, not someone else's)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()


def _user_name() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", user).lstrip("._-")[:64]
    return cleaned or "dev"
