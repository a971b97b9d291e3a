#!/usr/bin/env bash
# The test command, fresh machine included: installs what the tests need, then runs the
# linters, the type checker and the whole test suite. Extra arguments go to pytest.
#
#   bash tests/run.sh            # everything
#   bash tests/run.sh -k relay   # a subset
#
# What it installs, each only when missing:
#   .venv/                        the project with its test extras (pip, PyPI)
#   ~/.cache/codex-presence/...   the real codex binary, npm @openai/codex@0.169.0
#   /usr/bin/chromium             Debian's chromium, for the web roster tests (apt, as root)
set -euo pipefail
cd "$(dirname "$0")/.."

CODEX_VERSION=0.169.0
CODEX_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/codex-presence/codex-$CODEX_VERSION"
export CODEX_PRESENCE_TEST_CODEX="${CODEX_PRESENCE_TEST_CODEX:-$CODEX_DIR/node_modules/.bin/codex}"

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

step "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

step "mypy --strict"
.venv/bin/mypy

step "import contracts (the layering, pyproject.toml [tool.importlinter])"
.venv/bin/lint-imports

step "pytest"
.venv/bin/pytest "$@"
