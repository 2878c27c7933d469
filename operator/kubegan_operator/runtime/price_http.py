"""Bounded HTTP GETs for the price sources (clouds' price APIs, a Prometheus).

Every request has a connect timeout, a timeout per read and a deadline for the whole answer,
and an answer larger than its bound is refused while it is read. A 429 or 5xx answer is tried
again after the server's Retry-After (seconds or an HTTP date) or, without one, an exponential
backoff; a bounded number of times. Every failure is one PriceSourceError line naming the URL
without its query (an API key travels in the query and is never shown).
"""

from __future__ import annotations

import email.utils
import http.client
import json
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from kubegan_operator.api.price_file import PriceSourceError

MiB = 1 << 20


@dataclass(frozen=True)
class HttpLimits:
    connect_seconds: float = 10.0
    read_seconds: float = 30.0  # per socket read
    answer_seconds: float = 120.0  # the whole answer, headers to last byte
    max_bytes: int = 32 * MiB  # a Cloud Billing page of 5000 SKUs is about 8 MiB
    attempts: int = 5  # for 429 and 5xx answers
    backoff_seconds: float = 1.0  # doubled per attempt when the server names no wait
    max_wait_seconds: float = 60.0  # a longer Retry-After is not waited for: give up


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes


def shown(url: str, secret: str = "") -> str:
    """The URL as messages print it: no query (where keys travel), no credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    text = f"{parts.scheme}://{host}{parts.path}"
    return text.replace(secret, "<key>") if secret else text


def _connection(url: str, limits: HttpLimits) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    target = parts.path or "/"
    if parts.query:
        target += f"?{parts.query}"
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname or "",
            parts.port,
            timeout=limits.connect_seconds,
            context=ssl.create_default_context(),
        )
    elif parts.scheme == "http":
        conn = http.client.HTTPConnection(
            parts.hostname or "", parts.port, timeout=limits.connect_seconds
        )
    else:
        raise PriceSourceError(f"{shown(url)}: only http and https URLs can be read")
    return conn, target


def _read_body(response: http.client.HTTPResponse, limits: HttpLimits, deadline: float) -> bytes:
    length = response.getheader("Content-Length")
    if length and length.isdigit() and int(length) > limits.max_bytes:
        raise PriceSourceError(f"the answer is {int(length)} bytes, over {limits.max_bytes}")
    chunks: list[bytes] = []
    size = 0
    while chunk := response.read(64 * 1024):
        size += len(chunk)
        if size > limits.max_bytes:
            raise PriceSourceError(f"the answer is over {limits.max_bytes} bytes")
        if time.monotonic() > deadline:
            raise PriceSourceError(f"the answer took over {limits.answer_seconds:.0f} s")
        chunks.append(chunk)
    return b"".join(chunks)


def _get_once(url: str, limits: HttpLimits) -> _Answer:
    conn, target = _connection(url, limits)
    deadline = time.monotonic() + limits.answer_seconds
    try:
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(limits.read_seconds)  # connected: from now on, per read
        conn.request("GET", target, headers={"Accept": "application/json", "User-Agent": "kubegan"})
        response = conn.getresponse()
        headers = {k.lower(): v for k, v in response.getheaders()}
        return _Answer(response.status, headers, _read_body(response, limits, deadline))
    finally:
        conn.close()


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def _error_detail(body: bytes) -> str:
    """The server's own words, when it gave some: Google's error.message, Azure's
    Error.Message, else the start of the text."""
    try:
        page = json.loads(body)
        inner = page.get("error") or page.get("Error")
        text = str(inner.get("message") or inner.get("Message")) if isinstance(inner, dict) else ""
    except (ValueError, AttributeError, UnicodeDecodeError):
        text = body[:200].decode("utf-8", "replace")
    text = " ".join(text.split())[:200]
    return f": {text}" if text else ""


def get(
    url: str,
    limits: HttpLimits = HttpLimits(),
    *,
    secret: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """The body of a 200 answer to GET `url`; PriceSourceError (one line) otherwise."""
    where = shown(url, secret)
    for attempt in range(1, limits.attempts + 1):
        try:
            answer = _get_once(url, limits)
        except PriceSourceError as err:
            raise PriceSourceError(f"{where}: {err}") from None
        except (OSError, http.client.HTTPException) as err:
            reason = "timed out" if isinstance(err, socket.timeout) else str(err) or repr(err)
            reason = reason.replace(secret, "<key>") if secret else reason
            raise PriceSourceError(f"{where}: cannot connect or read ({reason})") from None
        if answer.status == 200:
            return answer.body
        if answer.status != 429 and not 500 <= answer.status < 600:
            detail = _error_detail(answer.body)
            detail = detail.replace(secret, "<key>") if secret else detail
            raise PriceSourceError(f"{where}: HTTP {answer.status}{detail}")
        if attempt == limits.attempts:
            break
        wait = retry_after(answer.headers.get("retry-after"), time.time())
        if wait is not None and wait > limits.max_wait_seconds:
            raise PriceSourceError(
                f"{where}: HTTP {answer.status}, asked to wait {wait:.0f} s; try again later"
            )
        sleep(wait if wait is not None else limits.backoff_seconds * 2 ** (attempt - 1))
    raise PriceSourceError(
        f"{where}: HTTP {answer.status} {limits.attempts} times; gave up, try again later"
    )
