#!/usr/bin/env bash
# The test command, fresh machine included: installs what the tests need, then runs the
# linters, the type checker and the whole test suite. Extra arguments go to pytest.
#
#   bash tests/run.sh            # everything
#   bash tests/run.sh -k relay   # a subset
#
# What it installs, each only when missing:
#   .venv/                        the project with its test extras (pip, PyPI)
#   ~/.cache/codex-presence/...   the real codex binary, npm @openai/codex@0.169.0,
#                                 and the real claude, npm @anthropic-ai/claude-code@2.1.332
#   /usr/bin/tmux                 Debian's tmux, the terminal the interactive claude runs in
#   /usr/bin/chromium             Debian's chromium, for the web roster tests (apt, as root)
set -euo pipefail
cd "$(dirname "$0")/.."

CODEX_VERSION=0.169.0
CODEX_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/codex-presence/codex-$CODEX_VERSION"
export CODEX_PRESENCE_TEST_CODEX="${CODEX_PRESENCE_TEST_CODEX:-$CODEX_DIR/node_modules/.bin/codex}"
CLAUDE_VERSION=2.1.332
CLAUDE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/codex-presence/claude-code-$CLAUDE_VERSION"
export CODEX_PRESENCE_TEST_CLAUDE="${CODEX_PRESENCE_TEST_CLAUDE:-$CLAUDE_DIR/node_modules/.bin/claude}"

step() { printf '\n== %s\n' "$*"; }

step "python environment (.venv)"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'

step "codex $CODEX_VERSION"
if [ ! -x "$CODEX_PRESENCE_TEST_CODEX" ]; then
    npm install --prefix "$CODEX_DIR" --no-audit --no-fund --loglevel=error "@openai/codex@$CODEX_VERSION"
fi
"$CODEX_PRESENCE_TEST_CODEX" --version

step "claude $CLAUDE_VERSION"
if [ ! -x "$CODEX_PRESENCE_TEST_CLAUDE" ]; then
    # The package's postinstall puts its native binary (~390 MB) in place of the launcher.
    npm install --prefix "$CLAUDE_DIR" --no-audit --no-fund --loglevel=error \
        "@anthropic-ai/claude-code@$CLAUDE_VERSION"
fi
DISABLE_AUTOUPDATER=1 "$CODEX_PRESENCE_TEST_CLAUDE" --version

apt_updated=
apt_install() {  # apt_install PACKAGE COMMAND: Debian's PACKAGE unless COMMAND exists
    if command -v "$2" >/dev/null 2>&1; then
        return
    fi
    if [ "$(id -u)" = 0 ]; then
        [ -n "$apt_updated" ] || apt-get update -qq
        apt_updated=1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
    else
        echo "$2 is missing and this is not root: install Debian's $1 package" >&2
    fi
}

step "chromium, tmux"
apt_install chromium chromium
apt_install tmux tmux
command -v chromium && chromium --version || true
command -v tmux && tmux -V || true

step "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

step "mypy --strict"
.venv/bin/mypy

step "pytest"
.venv/bin/pytest "$@"
