"""The broker behind a real reverse proxy: Debian's nginx terminating TLS on loopback
(a throwaway certificate, ``bench/_tls.py``), configured as docs/deploy/nginx.conf is
(``proxy_set_header Host $host``, which drops the port; ``X-Forwarded-Proto``; buffering
off), in front of a real broker process; the page signed in from real Chromium.

Before (issue 33): the page said "Sign-in failed (HTTP 403)" and the broker logged nothing;
the Origin a browser sends (``https://host:8443``) never matched the ``Host`` nginx sent.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from bench._tls import find_openssl, make_tls_files
from codex_presence.broker.team_file import render_team
from tests.support.broker_harness import broker_process, token_of
from tests.support.waiting import WAIT

CHROMIUM = Path(os.environ.get("CODEX_PRESENCE_TEST_CHROMIUM") or "/usr/bin/chromium")
DOCS_CONF = Path(__file__).parent.parent / "docs" / "deploy" / "nginx.conf"


def required(path: str | None, package: str) -> str:
    if path is None or not Path(path).exists():
        message = f"{package} is missing (apt-get install {package})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def nginx(workdir: Path, upstream: int, port: int = 0) -> Iterator[int]:
    """nginx on loopback ``port`` (0: a free one), TLS, in front of ``upstream``: the ``location``
    block of docs/deploy/nginx.conf, word for word, pointed at the test's broker."""
    binary = required(shutil.which("nginx") or "/usr/sbin/nginx", "nginx-light")
    files = make_tls_files(workdir / "tls", required(find_openssl(), "openssl"))
    location = DOCS_CONF.read_text().split("    location / {", 1)[1].split("\n    }", 1)[0]
    location = location.replace("127.0.0.1:8780", f"127.0.0.1:{upstream}")
    port = port or free_port()
    temp = workdir / "nginx-temp"
    temp.mkdir()
    (workdir / "nginx.conf").write_text(
        f"""daemon off;
pid {workdir}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {files.cert};
        ssl_certificate_key {files.key};
        location / {{{location}
        }}
    }}
}}
"""
    )
    with subprocess.Popen(
        [binary, "-e", "stderr", "-p", str(workdir), "-c", str(workdir / "nginx.conf")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, f"nginx ended: {proc.communicate()[1]}"
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "nginx never listened within 60 s"
                    time.sleep(0.05)
            yield port
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(WAIT)


def team_file(tmp_path: Path) -> str:
    path = tmp_path / "team.toml"
    path.write_text(render_team("acme", [("alice", None, token_of("alice"))]))
    return str(path)


def test_a_refused_sign_in_behind_a_proxy_says_what_it_saw(tmp_path: Path) -> None:
    """Without --public-url, the 403 is logged with the Origin and Host it saw and what
    would have been accepted (before: nothing was logged)."""
    with (
        broker_process("--team", team_file(tmp_path)) as broker,
        nginx(tmp_path, broker.port) as proxy,
    ):
        page = f"https://127.0.0.1:{proxy}"
        answer = httpx.post(
            page + "/session",
            data={"token": token_of("alice")},
            headers={"origin": page},
            verify=False,
            timeout=60,
        )
        assert answer.status_code == 403, answer.text
        said = broker.stderr.until("web sign-in refused", 60)
    assert re.search(
        rf"Origin '{re.escape(page)}', Host '127\.0\.0\.1'; accepted: .*--public-url", said
    ), said


@pytest.mark.browser
def test_the_page_signs_in_behind_nginx_with_tls(tmp_path: Path) -> None:
    chromium = required(str(CHROMIUM), "chromium")
    proxy_port = free_port()  # the broker must know its public address before nginx runs
    public = f"https://127.0.0.1:{proxy_port}"
    with broker_process("--team", team_file(tmp_path), "--public-url", public) as broker:
        with nginx(tmp_path, broker.port, proxy_port), sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            try:
                context = browser.new_context(ignore_https_errors=True)
                page = context.new_page()
                page.set_default_timeout(60_000)
                page.goto(public + "/")
                expect(page.locator("#signin")).to_be_visible()
                page.fill("#token", token_of("alice"))
                page.click("#signin-submit")
                expect(page.locator("body")).to_have_attribute("data-stream", "live")
                expect(page.locator("#me")).to_have_text("alice")
                (cookie,) = context.cookies()
                assert cookie["secure"] is True  # X-Forwarded-Proto: https
            finally:
                browser.close()
        assert "refused" not in broker.said()
