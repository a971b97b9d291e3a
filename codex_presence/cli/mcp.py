"""``codex-presence mcp``: the ``roster`` MCP tool as a stdio MCP server."""

from __future__ import annotations

import argparse

HELP = "serve the roster MCP tool over stdio (for codex's [mcp_servers])"

_EPILOG = """\
Configure it in codex's config.toml, for example:

  [mcp_servers.presence]
  command = "codex-presence"
  args = ["mcp", "--broker", "http://127.0.0.1:8765", "--name", "alice",
          "--token-file", "/home/alice/.config/codex-presence/alice.token"]

stdout carries the MCP protocol; logs go to stderr (or --log-file). The token comes from
--token-file FILE or $CODEX_PRESENCE_TOKEN (codex passes a server only the environment its
[mcp_servers.*] env table names, so prefer --token-file).
"""


def configure(parser: argparse.ArgumentParser) -> None:
    from codex_presence.client.auth import add_client_options

    parser.epilog = _EPILOG
    add_client_options(parser)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    parser.add_argument("--log-file", metavar="FILE", help="log here instead of stderr")


def run(args: argparse.Namespace) -> int:
    import anyio

    from codex_presence.cli.main import UsageError, setup_logging
    from codex_presence.client.auth import TokenError, read_token
    from codex_presence.client.mcp_tool import RosterSource, build_server

    # Warnings only unless -v: codex shows an MCP server's stderr to its user.
    quiet = args.quiet or not args.verbose
    setup_logging(verbose=args.verbose, quiet=quiet, log_file=args.log_file)
    if not args.broker:
        raise UsageError("no broker: pass --broker URL or set CODEX_PRESENCE_BROKER")
    try:
        token = read_token(token_file=args.token_file)
    except TokenError as exc:
        raise UsageError(str(exc)) from None
    source = RosterSource(broker=args.broker, token=token, name=args.name)
    anyio.run(build_server(source).run_stdio_async)
    return 0
