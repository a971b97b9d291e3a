"""The ``codex-presence`` command line: one module per subcommand, each import-light."""
