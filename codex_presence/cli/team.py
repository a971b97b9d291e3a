"""``codex-presence team``: ``init`` writes a team file with fresh tokens, each printed once;
``add``, ``remove`` and ``rotate`` change one member of it (a running broker reads the file
again within a second, or at once on SIGHUP)."""

from __future__ import annotations

import argparse
import sys

HELP = "write a team file for the broker, and add, remove or re-token its members"

_EPILOG = """\
example:
  codex-presence team init team.toml --team acme \\
      --member alice:director:members.manage,objectives.create \\
      --member builder:engineer --member scout:scout:objectives.create

permissions the roster knows, and the privilege bucket each gives a member:
{permissions}
  (admin wins over operator; other permissions are kept, with a warning, and give none)

Each token is printed once on stdout (NAME<TAB>TOKEN); the file keeps only their sha256
and is written with mode 0600. Give each member their token, e.g. in a 0600 file for
--token-file, or in $CODEX_PRESENCE_TOKEN.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    from codex_presence._wire import KNOWN_PERMISSIONS

    known = "\n".join(f"  {perm:<20} [{bucket}]" for perm, bucket in KNOWN_PERMISSIONS.items())
    actions = parser.add_subparsers(dest="team_action", metavar="ACTION", required=True)
    init = actions.add_parser(
        "init",
        help="write a new team file",
        description="Write a new team file with a fresh random token per member.",
        epilog=_EPILOG.format(permissions=known),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    init.set_defaults(_parser=init)  # an unknown option is told with init's usage
    init.add_argument("file", metavar="FILE", help="the team file to write (TOML)")
    init.add_argument(
        "--member",
        "-m",
        dest="members",
        metavar="NAME[:TITLE[:perm,perm]]",
        action="append",
        required=True,
        help="a member, with an optional role title and comma-separated permissions "
        "(repeat; the permissions that make a bucket are listed below)",
    )
    init.add_argument(
        "--team", dest="team_name", metavar="NAME", default="team", help="the team's name"
    )
    init.add_argument("--force", action="store_true", help="replace an existing file")
    for action, summary in _EDITS.items():
        edit = actions.add_parser(
            action,
            help=summary,
            description=f"{summary[0].upper()}{summary[1:]}. {_EDIT_NOTE}",
            allow_abbrev=False,
        )
        edit.set_defaults(_parser=edit)
        edit.add_argument("file", metavar="FILE", help="the team file (TOML), rewritten 0600")
        if action == "add":
            edit.add_argument(
                "member",
                metavar="NAME[:TITLE[:perm,perm]]",
                help="the new member, as team init's --member takes it",
            )
        else:
            edit.add_argument("member", metavar="NAME", help="the member")


_EDITS = {
    "add": "add a member with a fresh token, printed once (NAME<TAB>TOKEN)",
    "remove": "remove a member: their token stops working, their streams end",
    "rotate": "give a member a fresh token, printed once: the old one stops working",
}
_EDIT_NOTE = (
    "The file keeps only the tokens' sha256, and everything else it holds ([[notify]] too; "
    "not its comments). A broker running with it reads it again within a second, or at "
    "once on SIGHUP."
)


def run(args: argparse.Namespace) -> int:
    if args.team_action != "init":
        return _edit(args)
    return _init(args)


def _edit(args: argparse.Namespace) -> int:
    """``team add``, ``remove``, ``rotate``: one member of an existing file."""
    from codex_presence.broker.notify.config import parse_notify
    from codex_presence.broker.team import TeamError, hash_token, new_token
    from codex_presence.broker.team_file import (
        parse_member_spec,
        parse_team,
        read_own_team_file,
        render_team_data,
        write_team,
    )
    from codex_presence.cli.main import UsageError

    try:
        data = read_own_team_file(args.file)
        members: list[dict[str, object]] = list(data["members"])
        names = [m.get("name") for m in members]
        token = None
        if args.team_action == "add":
            name, role = parse_member_spec(args.member)
            if name in names:
                raise TeamError(
                    f"{args.file}: {name!r} is a member already (rotate gives a new token)"
                )
            token = new_token()
            added: dict[str, object] = {"name": name}
            if role is not None:
                added["role"] = {"title": role.title, "permissions": list(role.permissions)}
            added["token_sha256"] = hash_token(token).hex()
            members.append(added)
        else:
            name = args.member
            if name not in names:
                known = ", ".join(str(n) for n in names)
                raise TeamError(f"{args.file}: no member {name!r} (the members: {known})")
            index = names.index(name)
            if args.team_action == "remove":
                del members[index]
            else:
                token = new_token()
                rotated = {
                    k: v for k, v in members[index].items() if k not in ("token", "token_sha256")
                }
                rotated["token_sha256"] = hash_token(token).hex()
                members[index] = rotated
        data = {**data, "members": members}
        team = parse_team(data, source=args.file)  # e.g. the last member removed
        parse_notify(data, team, source=args.file)  # a [[notify]] naming a removed member
        write_team(args.file, render_team_data(data), force=True)
    except TeamError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        sys.stderr.write(f"codex-presence team: cannot write {args.file}: {exc.strerror}\n")
        return 1
    if token is not None:
        sys.stdout.write(f"{name}\t{token}\n")
    done = {"add": "added", "remove": "removed", "rotate": "gave a new token to"}
    told = "" if token is None else " The token above is shown only now; the file keeps its sha256."
    sys.stderr.write(
        f"codex-presence team: {done[args.team_action]} {name} in {args.file} (mode 0600).{told}\n"
    )
    return 0


def _init(args: argparse.Namespace) -> int:
    from codex_presence._wire import KNOWN_PERMISSIONS, counted, printable
    from codex_presence.broker.team import TeamError, new_token
    from codex_presence.broker.team_file import (
        parse_member_spec,
        refuse_control_characters,
        render_team,
        write_team,
    )
    from codex_presence.cli.main import UsageError

    try:
        specs = [parse_member_spec(spec) for spec in args.members]
    except TeamError as exc:
        raise UsageError(str(exc)) from None
    names = [name for name, _ in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"member(s) given twice: {', '.join(dupes)}")
    if not args.team_name.strip():
        raise UsageError("--team must not be empty")
    try:
        refuse_control_characters(args.team_name, "--team")
    except TeamError as exc:
        raise UsageError(str(exc)) from None
    for name, role in specs:
        for permission in role.permissions if role else ():
            if permission not in KNOWN_PERMISSIONS:
                known = ", ".join(f"{p} [{b}]" for p, b in KNOWN_PERMISSIONS.items())
                sys.stderr.write(
                    f"codex-presence team: warning: --member {name}: permission "
                    f"{printable(permission)!r} is not one the roster knows ({known}); it is "
                    "kept, and gives no privilege bucket\n"
                )
    members = [(name, role, new_token()) for name, role in specs]
    try:
        write_team(args.file, render_team(args.team_name, members), force=args.force)
    except TeamError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        sys.stderr.write(f"codex-presence team: cannot write {args.file}: {exc.strerror}\n")
        return 1
    for name, _, token in members:
        sys.stdout.write(f"{name}\t{token}\n")
    where = (
        "The tokens above are shown only now"
        if sys.stdout.isatty()
        else "The tokens went to standard output (a name and its token a line), only now: "
        "keep them private"
    )
    sys.stderr.write(
        f"codex-presence team: wrote {args.file} ({counted(len(members), 'member')}, mode 0600). "
        f"{where}; the file keeps their sha256.\n"
    )
    return 0
