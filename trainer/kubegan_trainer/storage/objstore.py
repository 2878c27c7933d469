"""Buckets: one client (obstore, Rust `object_store` underneath) for S3, GCS and Azure Blob.

- URIs: `s3://bucket/prefix`, `gs://bucket/prefix`, `az://container/prefix`.
- Credentials come only from the environment and the pod's identity, as the clouds' own
  tools find them (AWS web identity or `AWS_*` keys, GKE's metadata server or
  `GOOGLE_APPLICATION_CREDENTIALS`, Azure workload identity or `AZURE_STORAGE_*`); a Secret's
  keys arrive as such variables. They are never logged: every message about a store passes
  through `one_line`, which also blanks any secret value that leaked into a client's error.
- An S3-compatible store's endpoint: `ENV_CHECKPOINT_ENDPOINT`, else `AWS_ENDPOINT_URL` (read
  by the client itself, as the AWS tools do); plain http is allowed only for such an explicit
  endpoint (a local test server), never for the clouds' own.
- Errors: the client's own retries are off, so every retry is ours, bounded and logged
  (`call`): transient ones (5xx, throttling, a connection refused or reset) are retried
  with exponential backoff up to RETRY_SECONDS; permanent ones (no such bucket, no
  permission, bad credentials, a full store) and transient ones that outlast the retries
  raise StoreError, a TrainerError of one line.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from kubegan_api.contract import ENV_AWS_ENDPOINT_URL, ENV_CHECKPOINT_ENDPOINT

from kubegan_trainer.base.errors import TrainerError

log = logging.getLogger(__name__)

SCHEMES = ("s3", "gs", "az")
# Bucket names as the three clouds allow them (S3/GCS: 3-63 of [a-z0-9.-_]; Azure containers
# are a subset); checked here so a typo is one line before any request.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$")
RETRY_SECONDS = 60.0  # the longest a transient error is retried before it counts as permanent
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 8.0
CONNECT_TIMEOUT = "5s"
REQUEST_TIMEOUT = "300s"
# Values that must never appear in a message (credentials a Secret may have provided).
_SECRET_VARS = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
)
T = TypeVar("T")


class StoreError(TrainerError):
    """A bucket operation failed for good (one line, no credentials)."""


@dataclass(frozen=True)
class BucketUri:
    scheme: str
    bucket: str
    prefix: str  # no leading or trailing slash; may be empty

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, *parts: str) -> str:
        """The full object name of `parts` under this prefix, for messages."""
        return "/".join(p for p in (self.prefix, *parts) if p)


def parse_uri(uri: str, what: str) -> BucketUri:
    """`uri` as a BucketUri; StoreError naming `what` (the setting) when it is not one."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in SCHEMES:
        raise StoreError(f"{what}: {uri[:200]!r} is not a bucket URI (s3://, gs:// or az://)")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise StoreError(f"{what}: {bucket[:80]!r} is not a bucket or container name")
    prefix = prefix.strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise StoreError(f"{what}: the prefix {prefix[:120]!r} has an empty, . or .. part")
    return BucketUri(scheme, bucket, prefix)


def endpoint_override(environ: Mapping[str, str] | None = None) -> str | None:
    """The S3-compatible endpoint asked for, if any (ours first, then the AWS tools')."""
    e = os.environ if environ is None else environ
    return e.get(ENV_CHECKPOINT_ENDPOINT) or e.get(ENV_AWS_ENDPOINT_URL) or None


def open_store(uri: BucketUri, endpoint: str | None = None) -> Any:
    """An obstore store rooted at `uri` (its prefix), credentials from the environment."""
    from obstore.store import AzureStore, GCSStore, S3Store

    client: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT, "timeout": REQUEST_TIMEOUT}
    retry = {"max_retries": 0, "retry_timeout": timedelta(seconds=1)}  # ours are in `call`
    prefix = uri.prefix or None
    if uri.scheme == "s3":
        endpoint = endpoint or endpoint_override()
        extra: dict[str, Any] = {}
        if endpoint:
            extra["endpoint"] = endpoint
            client["allow_http"] = endpoint.startswith("http://")
        if not os.environ.get("AWS_REGION") and not os.environ.get("AWS_DEFAULT_REGION"):
            extra["region"] = "us-east-1"  # S3-compatible stores ignore it; AWS redirects
        return S3Store(
            uri.bucket, prefix=prefix, client_options=client, retry_config=retry, **extra
        )
    if uri.scheme == "gs":
        return GCSStore(uri.bucket, prefix=prefix, client_options=client, retry_config=retry)
    return AzureStore(uri.bucket, prefix=prefix, client_options=client, retry_config=retry)


# ---- errors --------------------------------------------------------------------------------
_PERMANENT_CODES = {
    "NoSuchBucket": "the bucket does not exist",
    "ContainerNotFound": "the container does not exist",
    "AccessDenied": "no permission",
    "AuthorizationFailure": "no permission",
    "AuthorizationPermissionMismatch": "no permission",
    "InvalidAccessKeyId": "the credentials are not valid",
    "SignatureDoesNotMatch": "the credentials are not valid",
    "ExpiredToken": "the credentials have expired",
    "QuotaExceeded": "the store is full",
    "InsufficientStorage": "the store is full",
    "XMinioStorageFull": "the store is full",
    "507 Insufficient Storage": "the store is full",
    "InsufficientAccountPermissions": "no permission",
}
_TRANSIENT = re.compile(
    r"error sending request|connection (refused|reset|closed)|timed? ?out|"
    r"\b(500|502|503|504)\b|SlowDown|ServiceUnavailable|InternalError|RequestTimeout|"
    r"ServerBusy|\b429\b|TooManyRequests",
    re.I,
)


def one_line(err: BaseException, limit: int = 240) -> str:
    """The first line of a client error, shortened, with any secret value blanked."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    for name in _SECRET_VARS:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def classify(err: BaseException) -> tuple[bool, str]:
    """(transient?, reason in words) for an error a store call raised."""
    text = str(err)
    for code, words in _PERMANENT_CODES.items():
        if code in text:
            return False, f"{words} ({code})"
    if re.search(r"\b403\b|PermissionDenied|Forbidden", text) or type(err).__name__ in (
        "PermissionDeniedError",
        "UnauthenticatedError",
    ):
        return False, "no permission"
    # Only the first line, without its URL: the client's debug dump below it names settings
    # such as `retry_timeout`, and a URL's digits can look like a status code.
    first = re.sub(r"https?://\S+", "", text.strip().splitlines()[0] if text.strip() else "")
    if _TRANSIENT.search(first):
        return True, one_line(err)
    return False, one_line(err)


def call(
    what: str,
    fn: Callable[[], T],
    *,
    budget: float | None = None,
    warn: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`fn()`, its transient errors retried with exponential backoff for up to `budget`
    seconds (None: RETRY_SECONDS, read at the call; each retry logged); StoreError (one line,
    naming `what`) when it fails for good.
    Errors that are answers, not failures (not found, already exists, precondition), are
    raised unchanged for the caller to decide."""
    from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError

    warn = warn or log.warning
    budget = RETRY_SECONDS if budget is None else budget
    deadline = time.monotonic() + budget
    delay, attempt = FIRST_BACKOFF, 1
    while True:
        try:
            return fn()
        except (AlreadyExistsError, PreconditionError):
            raise
        except (NotFoundError, FileNotFoundError) as err:
            if "NoSuchBucket" in str(err) or "ContainerNotFound" in str(err):
                raise StoreError(f"{what}: {classify(err)[1]}") from None
            raise
        except Exception as err:
            transient, reason = classify(err)
            if not transient:
                raise StoreError(f"{what}: {reason}") from None
            if time.monotonic() + delay > deadline:
                raise StoreError(
                    f"{what}: still failing after {attempt} tries in {budget:.0f} s ({reason})"
                ) from None
            warn(f"{what}: transient error, retry {attempt} in {delay:.1f} s ({reason})")
            sleep(delay)
            delay, attempt = min(delay * 2, MAX_BACKOFF), attempt + 1
