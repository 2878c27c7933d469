"""A registry of a test's own: the CNCF distribution registry (hack/build-binaries.sh builds
it), with TLS from a CA made here and htpasswd authentication (a bcrypt hash of a random
password). Its storage is removed when the test is done with it.

Disk: a registry stores every blob it is sent. `seed_layers` gives it an image's layers as
hard links to the OCI layout's files (same digests, never written after they are made), and
links them into the repository, so a push of that image sends only its config and manifest:
the gigabytes of the trainer images are on disk once, however many stores hold them."""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import datetime
import ipaddress
import json
import os
import re
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubegan_trainer.launch.ports import reserve_ports

from tests.support import oci_layout

USER = "kubegan-ci"
ACCESS = re.compile(r'^(\S+) \S+ \S+ \[[^\]]+\] "([A-Z]+) (\S+) [^"]*" (\d{3}) ')
STORAGE_ROOT = Path("docker") / "registry" / "v2"  # the filesystem driver's layout


class Request(NamedTuple):
    client: str  # the address it came from
    method: str
    uri: str
    status: str


def bcrypt_hash(password: str) -> str:
    """An htpasswd bcrypt hash by the C library's crypt (libxcrypt): no package for one hash."""
    lib = ctypes.CDLL(ctypes.util.find_library("crypt") or "libcrypt.so.1")
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = lib.crypt_gensalt(b"$2b$", 5, None, 0)
    hashed = lib.crypt(password.encode(), salt) if salt else None
    assert hashed and hashed.startswith(b"$2b$05$"), "libcrypt made no bcrypt hash"
    return hashed.decode()


def _cert(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[str, ec.EllipticCurvePrivateKey]
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer[0])]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def _usage(*, key_cert_sign: bool = False, digital_signature: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=key_cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def make_tls(where: Path, ips: list[str]) -> tuple[Path, Path, Path]:
    """A CA of this test's own and a server certificate for `ips` signed by it: (CA
    certificate, server certificate, server key). The CA's key is never written."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        _cert("kubegan test registry CA", ca_key, ("kubegan test registry CA", ca_key))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(key_cert_sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    sans = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    server = (
        _cert("kubegan test registry", key, ("kubegan test registry CA", ca_key))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_usage(digital_signature=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (where / "ca.crt", where / "registry.crt", where / "registry.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].touch(mode=0o600)
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@dataclass(frozen=True)
class LocalRegistry:
    host: str  # ip:port, as image references name it
    path: str  # the repository path under which make push puts everything
    dir: Path
    storage: Path
    ca: Path
    password: str
    log: Path

    @property
    def prefix(self) -> str:
        """make push's REGISTRY: host and path."""
        return f"{self.host}/{self.path}"

    def docker_config(self, password: str | None = None) -> str:
        """A ~/.docker/config.json (and an imagePullSecret's .dockerconfigjson) for it."""
        token = base64.b64encode(f"{USER}:{password or self.password}".encode()).decode()
        return json.dumps({"auths": {self.host: {"auth": token}}})

    def push_env(self) -> dict[str, str]:
        """What hack/push.sh, crane and helm run with to reach it: its CA, the login, and
        credential files of this registry's own (never the user's)."""
        return {
            "REGISTRY": self.prefix,
            "KUBEGAN_REGISTRY_CA": str(self.ca),
            "KUBEGAN_REGISTRY_USER": USER,
            "KUBEGAN_REGISTRY_PASSWORD": self.password,
            "DOCKER_CONFIG": str(self.dir / "docker"),
            "HELM_REGISTRY_CONFIG": str(self.dir / "docker" / "config.json"),
            "HELM_CACHE_HOME": str(self.dir / "helm-cache"),
            "HELM_CONFIG_HOME": str(self.dir / "helm-config"),
        }

    def get(
        self, path: str, password: str | None = "", accept: str = ""
    ) -> tuple[int, dict[str, str]]:
        """GET https://<host><path>: (status, headers). password None: anonymous; "" its own."""
        request = urllib.request.Request(f"https://{self.host}{path}")
        if password is not None:
            token = base64.b64encode(f"{USER}:{password or self.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        if accept:
            request.add_header("Accept", accept)
        context = ssl.create_default_context(cafile=str(self.ca))
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                return response.status, dict(response.headers)
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers)

    def requests(self) -> list[Request]:
        """What the access log (Apache combined format) says was asked, in order."""
        found = (ACCESS.match(ln) for ln in self.log.read_text(errors="replace").splitlines())
        return [Request(*m.groups()) for m in found if m]

    def seed_layers(self, layout: Path, image: str, repository: str) -> int:
        """The layers of `image` (a layout name) in this registry's storage as hard links to
        the layout's blobs, linked into `repository` (path/name): a push of the image then
        finds them there and sends none. Returns the bytes that were not copied."""
        saved = 0
        v2 = self.storage / STORAGE_ROOT
        for digest in oci_layout.layer_digests(layout, image):
            hexdigest = digest.removeprefix("sha256:")
            src = oci_layout.blob_path(layout, digest)
            data = v2 / "blobs" / "sha256" / hexdigest[:2] / hexdigest / "data"
            data.parent.mkdir(parents=True, exist_ok=True)
            if not data.exists():
                os.link(src, data)
            link = v2 / "repositories" / repository / "_layers" / "sha256" / hexdigest / "link"
            link.parent.mkdir(parents=True, exist_ok=True)
            link.write_text(digest)
            saved += src.stat().st_size
        return saved


def hosts_toml(host: str, ca: Path) -> str:
    """containerd's hosts.toml (certs.d/<host>/hosts.toml) for https://host with its CA. The
    CA also at the top, for the `server` entry containerd falls back to; containerd 1.6
    refuses a file without a [host] table."""
    return (
        f'server = "https://{host}"\nca = "{ca}"\n\n'
        f'[host."https://{host}"]\n  capabilities = ["pull", "resolve"]\n  ca = "{ca}"\n'
    )


def _config(addr: str, storage: Path, tls: tuple[Path, Path, Path], htpasswd: Path) -> dict:
    return {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": addr, "tls": {"certificate": str(tls[1]), "key": str(tls[2])}},
        "auth": {"htpasswd": {"realm": "kubegan-test", "path": str(htpasswd)}},
    }


def _wait_ready(reg: LocalRegistry, proc: subprocess.Popen[bytes]) -> None:
    """Up when /v2/ asks for credentials (401 with a Basic challenge)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the registry exited:\n{reg.log.read_text()[-3000:]}"
        try:
            status, headers = reg.get("/v2/", password=None)
            if status == 401 and "Basic" in headers.get("Www-Authenticate", ""):
                return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"the registry did not answer in 30 s:\n{reg.log.read_text()[-3000:]}")


@contextmanager
def local_registry(
    binary: str, work: Path, ip: str = "127.0.0.1", storage: Path | None = None
) -> Iterator[LocalRegistry]:
    """The registry on ip:<free port>, until the block ends; then it is stopped and its
    storage (default work/storage; give one on the layout's filesystem to seed from it)
    removed."""
    work.mkdir(parents=True, exist_ok=True)
    (port,) = reserve_ports(1)
    password = secrets.token_urlsafe(18)
    htpasswd = work / "htpasswd"
    htpasswd.write_text(f"{USER}:{bcrypt_hash(password)}\n")
    tls = make_tls(work, sorted({ip, "127.0.0.1"}))
    storage = storage or work / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    config = work / "config.yml"
    config.write_text(yaml.safe_dump(_config(f"{ip}:{port}", storage, tls, htpasswd)))
    reg = LocalRegistry(
        f"{ip}:{port}", "kubegan", work, storage, tls[0], password, work / "registry.log"
    )
    # No OpenTelemetry export: nothing listens for it here.
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none", "OTEL_SDK_DISABLED": "true"}
    with reg.log.open("ab") as log:
        proc = subprocess.Popen(
            [binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, env=env
        )
    try:
        _wait_ready(reg, proc)
        yield reg
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(storage, ignore_errors=True)
