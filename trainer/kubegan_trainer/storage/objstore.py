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
- URIs and endpoints are judged by the API's rules (kubegan_api.urls), the ones `kubegan
  validate` applies: no credentials in them, no empty, '.' or '..' prefix part, a host and a
  port from 1 to 65535; every message passes URLs through `redact_urls`.
- Errors: the client's own retries are off, so every retry is ours, bounded and logged
  (`call`): transient ones (5xx, throttling, a connection refused or reset, a store that
  accepts a connection and never answers: each read waits at most READ_TIMEOUT_SECONDS)
  are retried with exponential backoff up to RETRY_SECONDS (`ENV_STORE_TIMEOUT_SECONDS`
  overrides it); permanent ones (no such bucket, no permission, bad credentials, a full
  store) and transient ones that outlast the retries raise StoreError, a TrainerError of
  one line.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from kubegan_api.contract import (
    ENV_AWS_ENDPOINT_URL,
    ENV_CHECKPOINT_ENDPOINT,
    ENV_STORE_TIMEOUT_SECONDS,
)
from kubegan_api.urls import (
    BUCKET_SCHEMES,
    bucket_uri_problems,
    endpoint_problems,
    redact_urls,
    split_bucket_uri,
)

from kubegan_trainer.base.errors import TrainerError

log = logging.getLogger(__name__)

SCHEMES = BUCKET_SCHEMES
RETRY_SECONDS = 60.0  # the longest a transient error is retried before it counts as permanent
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 8.0
CONNECT_TIMEOUT = "5s"
# Each read of an answer (its headers too) waits at most this long, or a third of the retry
# budget when that is shorter, so a store that accepts and never answers is retried, and
# given up on, within the budget; a whole transfer may take REQUEST_TIMEOUT.
READ_TIMEOUT_SECONDS = 20.0
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
    """`uri` as a BucketUri; StoreError naming `what` (the setting) when it is not one, in the
    words `kubegan validate` uses (never repeating the value: it may hold a credential)."""
    problems = bucket_uri_problems(uri) if uri else ["is empty"]
    if problems:
        raise StoreError(f"{what}: {problems[0]}")
    return BucketUri(*split_bucket_uri(uri))


def endpoint_setting(environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """(the S3-compatible endpoint the environment asks for, ours first, then the AWS tools',
    or None; the variable that names it)."""
    e = os.environ if environ is None else environ
    name = next((n for n in (ENV_CHECKPOINT_ENDPOINT, ENV_AWS_ENDPOINT_URL) if e.get(n)), None)
    return (e[name], name) if name else (None, ENV_CHECKPOINT_ENDPOINT)


def check_endpoint(endpoint: str, field: str) -> str:
    """`endpoint` when the API's rules take it; StoreError naming `field` otherwise."""
    problems = endpoint_problems(endpoint)
    if problems:
        raise StoreError(f"{field}: {problems[0]}")
    return endpoint


def retry_seconds(environ: Mapping[str, str] | None = None) -> float:
    """How long a store operation is tried: ENV_STORE_TIMEOUT_SECONDS, else RETRY_SECONDS."""
    text = (os.environ if environ is None else environ).get(ENV_STORE_TIMEOUT_SECONDS, "")
    if not text:
        return RETRY_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 1 <= value <= 3600:  # NaN fails too
        raise StoreError(f"{ENV_STORE_TIMEOUT_SECONDS}: {text[:40]!r} is not 1 to 3600 seconds")
    return value


def open_store(
    uri: BucketUri, endpoint: str | None = None, endpoint_field: str = "endpoint"
) -> Any:
    """An obstore store rooted at `uri` (its prefix), credentials from the environment;
    `endpoint_field` names the setting that gave `endpoint`, for its refusal."""
    from obstore.store import AzureStore, GCSStore, S3Store

    read = min(READ_TIMEOUT_SECONDS, retry_seconds() / 3)
    client: dict[str, Any] = {
        "connect_timeout": CONNECT_TIMEOUT,
        "read_timeout": timedelta(seconds=read),
        "timeout": REQUEST_TIMEOUT,
    }
    retry = {"max_retries": 0, "retry_timeout": timedelta(seconds=1)}  # ours are in `call`
    prefix = uri.prefix or None
    if uri.scheme == "s3":
        if not endpoint:
            endpoint, endpoint_field = endpoint_setting()
        extra: dict[str, Any] = {}
        if endpoint:
            check_endpoint(endpoint, endpoint_field)
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
    text = redact_urls(text)
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
    budget = retry_seconds() if budget is None else budget
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
