"""Certificates for Redis over TLS on loopback: a throwaway certificate authority and a
server certificate for ``127.0.0.1`` signed by it, made with the ``openssl`` command (Debian's
``openssl`` package), in a directory its owner chooses and removes::

    files = make_tls_files(workdir)
    RedisServer(binary, workdir, tls=files)   # listens for TLS only
    ... "rediss://127.0.0.1:PORT/0?ssl_ca_certs=" + str(files.ca) ...

Standard library only, like ``_redis.py`` and ``_sentinel.py``, which take it: the tests of
``rediss://`` and ``rediss+sentinel://`` run real TLS through them (``tests/test_redis_tls.py``).
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TlsFiles", "find_openssl", "make_tls_files"]


@dataclass(frozen=True)
class TlsFiles:
    """The authority's certificate (what a client trusts) and the server's pair."""

    ca: Path
    cert: Path
    key: Path

    def server_options(self) -> tuple[str, ...]:
        """redis-server's (and redis-sentinel's) options for these files: TLS to and from
        it, no client certificate asked for."""
        return (
            "--tls-cert-file", str(self.cert),
            "--tls-key-file", str(self.key),
            "--tls-ca-cert-file", str(self.ca),
            "--tls-auth-clients", "no",
            "--tls-replication", "yes",
        )  # fmt: skip

    def client_context(self) -> ssl.SSLContext:
        """A client's context that trusts the authority and checks the host."""
        return ssl.create_default_context(cafile=str(self.ca))


def find_openssl() -> str | None:
    """The path of ``openssl``, or None when there is none."""
    return shutil.which("openssl")


def make_tls_files(directory: Path, openssl: str = "openssl") -> TlsFiles:
    """A new authority and a server certificate for ``127.0.0.1`` in ``directory`` (valid two
    days; P-256 keys, quick to make)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    cert, key = directory / "server.crt", directory / "server.key"
    request, extensions = directory / "server.csr", directory / "server.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1\n")
    new_key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for args in (
        ("req", "-x509", *new_key, "-keyout", ca_key, "-out", ca, "-days", "2",
         "-subj", "/CN=codex-presence test authority"),
        ("req", *new_key, "-keyout", key, "-out", request, "-subj", "/CN=127.0.0.1"),
        ("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", "2", "-extfile", extensions),
    ):  # fmt: skip
        subprocess.run([openssl, *map(str, args)], check=True, capture_output=True, timeout=60)
    key.chmod(0o600)
    return TlsFiles(ca=ca, cert=cert, key=key)
