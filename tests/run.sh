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
#   /usr/bin/chromium             Debian's chromium, for the web roster tests (apt, as root)
#   /usr/bin/tmux                 Debian's tmux, the pseudo-terminal of the TUI tests (apt)
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

step "chromium"
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "chromium is missing and this is not root: install Debian's chromium package" >&2
    fi
fi
command -v chromium && chromium --version || true

step "tmux"
if ! command -v tmux >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null
    else
        echo "tmux is missing and this is not root: install Debian's tmux package" >&2
    fi
fi
tmux -V || true

step "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

step "mypy --strict"
.venv/bin/mypy

step "pytest"
.venv/bin/pytest "$@"
