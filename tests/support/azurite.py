"""An Azure Blob server for the tests: Azurite (npm `azurite`, installed once per version into
the tool cache outside the repo), blob service only, on 127.0.0.1 on a leased free port,
objects in memory.

The trainer's client (obstore) reaches it as it reaches Azure, from the environment:
`AZURE_STORAGE_USE_EMULATOR=true` and `AZURITE_BLOB_STORAGE_URL` (the client then uses
Azurite's development account). Containers are created here with a Shared Key request signed
with that account's key, which Microsoft publishes for the emulator (not a secret).
"""

from __future__ import annotations

import base64
import datetime
import fcntl
import hashlib
import hmac
import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

from kubegan_trainer.launch.ports import reserve_port

from tests.support.local_server import LocalServer

VERSION = "3.37.0"
TOOLS = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kubegan" / "tools"
HOME = TOOLS / f"azurite-{VERSION}"
BINARY = HOME / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "devstoreaccount1"
# Azurite's documented development key (learn.microsoft.com, "Use Azurite"): public.
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
API_VERSION = "2021-08-06"


def ensure_binary() -> Path:
    """Azurite's blob server, `npm install`ed when this version is not cached yet."""
    HOME.mkdir(parents=True, exist_ok=True)
    with (HOME / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not BINARY.is_file():
            subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", f"azurite@{VERSION}"],
                cwd=HOME, check=True, timeout=900, capture_output=True,
            )  # fmt: skip
    return BINARY


class Azurite(LocalServer):
    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, log_dir: Path, disk: Path | None = None, disk_bytes: int = 0) -> Azurite:
        """In memory by default; with `disk`, blobs are kept in files there, and with
        `disk_bytes` no file may grow past that size (RLIMIT_FSIZE, no root needed): a store
        that fills up, whose writes then fail as a full disk makes them fail."""
        binary = ensure_binary()
        server = cls(reserve_port(), Path(log_dir) / "azurite.log")
        where = ["--location", str(disk)] if disk else ["--inMemoryPersistence"]
        server._launch(
            "azurite",
            [str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(server.port),
             *where, "--skipApiVersionCheck"],
            preexec_fn=(lambda: _limit_file_size(disk_bytes)) if disk_bytes else None,
        )  # fmt: skip
        return server

    def _probe(self) -> None:
        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()

    def env(self) -> dict[str, str]:
        return {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": self.endpoint}

    def make_container(self, name: str | None = None) -> str:
        """A new container, created with a Shared Key request (Azure's REST API)."""
        import urllib.request

        name = name or f"kubegan-{uuid.uuid4().hex[:12]}"
        date = datetime.datetime.now(datetime.UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
        to_sign = (
            "PUT\n" + "\n" * 11 + f"x-ms-date:{date}\nx-ms-version:{API_VERSION}\n"
            f"/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container"
        )
        mac = hmac.new(base64.b64decode(DEV_KEY), to_sign.encode(), hashlib.sha256).digest()
        req = urllib.request.Request(
            f"{self.endpoint}/{ACCOUNT}/{name}?restype=container",
            method="PUT",
            headers={
                "x-ms-date": date,
                "x-ms-version": API_VERSION,
                "Authorization": f"SharedKey {ACCOUNT}:{base64.b64encode(mac).decode()}",
                "Content-Length": "0",
            },
        )
        urllib.request.urlopen(req, timeout=10).close()
        return name


def _limit_file_size(limit: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def azurite_fixture(tmp_path_factory) -> Iterator[Azurite]:  # type: ignore[no-untyped-def]
    server = Azurite.start(tmp_path_factory.mktemp("azurite"))
    try:
        yield server
    finally:
        server.stop()
