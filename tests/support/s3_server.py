"""A real S3 server for the tests and benchmarks: moto's (`moto[server]`, pure Python; its S3
honours `If-None-Match: *` and `If-Match` on PUT and on CompleteMultipartUpload, which the
checkpoint contract's create-only manifest relies on), started as its own process on
127.0.0.1 (or another address of this machine: the e2e tier binds the real nodes' bridge so
their pods reach it) on a port from the repo's port helper (outside the ephemeral range,
leased).

`S3Server.start()` returns once the server answers; `env()` is the environment a trainer or
client needs to reach it (moto takes any key pair; `AWS_ENDPOINT_URL` is the override the AWS
tools and the trainer honour). `make_bucket` creates a bucket through the server's own API.
"""

from __future__ import annotations

import os
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kubegan_api.contract import ENV_AWS_ENDPOINT_URL
from kubegan_trainer.launch.ports import reserve_port

from tests.support.local_server import LocalServer

# moto accepts any credentials; these are the documented example pair, never a real secret.
TEST_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
TEST_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@dataclass
class S3Server(LocalServer):
    host: str = "127.0.0.1"
    buckets: list[str] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @classmethod
    def start(cls, log_dir: Path, host: str = "127.0.0.1") -> S3Server:
        """moto's server on `host` and a leased free port; raises AssertionError (with its log)
        when it does not answer within START_SECONDS."""
        server = cls(reserve_port(), Path(log_dir) / "moto.log", host=host)
        server._launch(
            "moto",
            [sys.executable, "-m", "moto.server", "-H", server.host, "-p", str(server.port)],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        return server

    def _probe(self) -> None:
        # URLError, what urlopen raises while nothing listens, is an OSError.
        urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).close()

    def env(self) -> dict[str, str]:
        """What a client needs to reach this server, as environment variables."""
        return {
            ENV_AWS_ENDPOINT_URL: self.endpoint,
            "AWS_ACCESS_KEY_ID": TEST_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": TEST_SECRET,
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def make_bucket(self, name: str | None = None) -> str:
        """A new empty bucket (a fresh unique name unless `name`)."""
        name = name or f"kubegan-{uuid.uuid4().hex[:12]}"
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(req, timeout=10).close()
        self.buckets.append(name)
        return name


def s3_server_fixture(tmp_path_factory) -> Iterator[S3Server]:  # type: ignore[no-untyped-def]
    """The body of a pytest fixture: one moto server for a module (or session)."""
    server = S3Server.start(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        server.stop()
