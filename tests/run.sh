#!/usr/bin/env bash
# The test command, fresh machine included: installs what the tests need, then runs the
# linters, the type checker and the whole test suite. Extra arguments go to pytest.
#
#   bash tests/run.sh            # everything
#   bash tests/run.sh -k relay   # a subset
#
# What it installs, each only when missing:
#   .venv/                        the project with its test extras (pip, PyPI)
#   ~/.cache/codex-presence/codex-VERSION/
#                                 the real codex binary, npm @openai/codex@VERSION, for
#                                 every VERSION with fixtures (fixtures/codex-VERSION/):
#                                 the tests that drive codex run once per version (the TUI
#                                 recordings, fixtures/codex-tui-VERSION/, use the same binaries)
#   ~/.cache/codex-presence/claude-code-VERSION/
#                                 the real claude, npm @anthropic-ai/claude-code@VERSION
#   ~/.cache/codex-presence/gemini-cli-VERSION/
#                                 the real gemini, npm @google/gemini-cli@VERSION
#   /usr/bin/chromium             Debian's chromium, for the web roster tests (apt, as root)
#   /usr/bin/tmux                 Debian's tmux, the pseudo-terminal of the TUI and claude tests
#   /usr/bin/redis-server         Debian's redis-server, for the brokers that share state
#                                 (one per test session and worker, on loopback,
#                                 persistence off, emptied before each test)
#   /usr/bin/redis-sentinel       Debian's redis-sentinel, for the failover tests
#   /usr/bin/openssl              Debian's openssl: throwaway certificates for Redis over TLS
#   /usr/sbin/nginx               Debian's nginx-light: the broker behind a TLS reverse proxy
#   /usr/bin/curl                 Debian's curl: the gemini tests' hooks POST their events with it
set -euo pipefail
cd "$(dirname "$0")/.."

# tests/codex_driver.py looks for the binaries here too.
export CODEX_PRESENCE_TEST_CODEX_CACHE="${CODEX_PRESENCE_TEST_CODEX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/codex-presence}"
CODEX_VERSIONS=()
shopt -s nullglob
for dir in fixtures/codex-[0-9]*/; do
    version="${dir#fixtures/codex-}"
    CODEX_VERSIONS+=("${version%/}")
done
CLAUDE_VERSION=2.1.332
CLAUDE_DIR="$CODEX_PRESENCE_TEST_CODEX_CACHE/claude-code-$CLAUDE_VERSION"
export CODEX_PRESENCE_TEST_CLAUDE="${CODEX_PRESENCE_TEST_CLAUDE:-$CLAUDE_DIR/node_modules/.bin/claude}"
GEMINI_VERSION=0.61.0
GEMINI_DIR="$CODEX_PRESENCE_TEST_CODEX_CACHE/gemini-cli-$GEMINI_VERSION"
export CODEX_PRESENCE_TEST_GEMINI="${CODEX_PRESENCE_TEST_GEMINI:-$GEMINI_DIR/node_modules/.bin/gemini}"

step() { printf '\n== %s\n' "$*"; }

step "python environment (.venv)"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'

for version in "${CODEX_VERSIONS[@]}"; do
    step "codex $version"
    codex_dir="$CODEX_PRESENCE_TEST_CODEX_CACHE/codex-$version"
    if [ ! -x "$codex_dir/node_modules/.bin/codex" ]; then
        npm install --prefix "$codex_dir" --no-audit --no-fund --loglevel=error "@openai/codex@$version"
    fi
    "$codex_dir/node_modules/.bin/codex" --version
done

step "claude $CLAUDE_VERSION"
if [ ! -x "$CODEX_PRESENCE_TEST_CLAUDE" ]; then
    # The package's postinstall puts its native binary (~390 MB) in place of the launcher.
    npm install --prefix "$CLAUDE_DIR" --no-audit --no-fund --loglevel=error \
        "@anthropic-ai/claude-code@$CLAUDE_VERSION"
fi
DISABLE_AUTOUPDATER=1 "$CODEX_PRESENCE_TEST_CLAUDE" --version

step "gemini $GEMINI_VERSION"
if [ ! -x "$CODEX_PRESENCE_TEST_GEMINI" ]; then
    npm install --prefix "$GEMINI_DIR" --no-audit --no-fund --loglevel=error \
        "@google/gemini-cli@$GEMINI_VERSION"
fi
GEMINI_CLI_NO_RELAUNCH=true "$CODEX_PRESENCE_TEST_GEMINI" --version

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

step "chromium, tmux, redis-server, nginx"
apt_install chromium chromium
apt_install tmux tmux
apt_install redis-server redis-server
apt_install redis-sentinel redis-sentinel
apt_install openssl openssl
PATH="$PATH:/usr/sbin" apt_install nginx-light nginx
apt_install curl curl
command -v chromium && chromium --version || true
command -v tmux && tmux -V || true
command -v redis-server && redis-server --version || true

step "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

step "mypy --strict"
.venv/bin/mypy

step "import contracts (the layering, pyproject.toml [tool.importlinter])"
.venv/bin/lint-imports

step "pytest"
# On parallel workers (pytest-xdist), each with its own redis-server and browser: most
# tests wait on processes and sockets rather than compute, so more workers than cores
# pays. Work stealing evens out the long tests. A later -n in the arguments wins
# (-n 0: no workers).
.venv/bin/pytest -n "${CODEX_PRESENCE_TEST_WORKERS:-4}" --dist worksteal "$@"
