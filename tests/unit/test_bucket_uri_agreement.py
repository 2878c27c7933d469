"""A bucket URI is judged once (kubegan_api.urls): `kubegan validate` takes exactly the URIs
the trainer's store takes, whatever they hold; and a URL's credentials are never printed,
whoever prints it (the trainer's store messages and log lines, `kubegan run`, the operator's
conditions and events)."""

from __future__ import annotations

import io
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubegan_api.sections import CheckpointSpec, DataSpec
from kubegan_api.status import GANTrainingJobStatus
from kubegan_api.urls import redact_urls
from kubegan_operator.decide.context import set_condition
from kubegan_trainer.launch.local_run import _Console
from kubegan_trainer.storage import objstore
from kubegan_trainer.worker.logs import RedactingFormatter
from pydantic import ValidationError

# Pieces a hostile URI is made of: schemes right and wrong, bucket names, the parts of a
# prefix that the store refuses ('.', '..', empty), credentials, spaces and controls.
PIECES = (
    "s3://", "gs://", "az://", "http://", "S3://", "s3:/", "bucket", "my.bucket-1", "ab", "B",
    "/", "//", ".", "..", "...", "a", "x.h5", "@", ":", "user:pw@", " ", "\x1b", "\x00", "?",
    "#", "%2e", "~", "_", "-", "é",
)  # fmt: skip


def validate_takes(uri: str) -> bool:
    try:
        CheckpointSpec(uri=uri)
        DataSpec(source="files", uri=uri)
    except ValidationError:
        return False
    return True


def trainer_takes(uri: str) -> bool:
    try:
        objstore.parse_uri(uri, "spec.checkpoint.uri")
    except objstore.StoreError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).map("".join))
def test_validate_takes_a_uri_exactly_when_the_trainer_does(uri: str) -> None:
    assert validate_takes(uri) == trainer_takes(uri), uri


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_the_two_agree_on_any_text_too(uri: str) -> None:
    assert validate_takes(uri) == trainer_takes(uri), uri


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket/..",
        "s3://bucket/.",
        "s3://bucket/a/../b",
        "s3://bucket/a/./b",
        "s3://bucket/a//b",
        "s3://bucket//a",
        "s3://bucket/a//",
        "gs://bucket///",
        "az://container/runs/../../other",
        "s3://user:pw@bucket/x",
        "s3://bucket/a b",
        "s3://bucket/x\x1b[2J",
        "s3://" + "b" * 300,
        "s3://bucket/" + "a" * 1100,
    ],
)
def test_prefixes_the_store_refuses_are_refused_by_validate(uri: str) -> None:
    assert (validate_takes(uri), trainer_takes(uri)) == (False, False)


@pytest.mark.parametrize(
    ("uri", "prefix"),
    [
        ("s3://bucket", ""),
        ("s3://bucket/", ""),
        ("s3://bucket/runs/", "runs"),
        ("gs://my.bucket/a/b/c", "a/b/c"),
        ("az://container/..a/b..", "..a/b.."),
    ],
)
def test_prefixes_both_take_mean_the_same_place(uri: str, prefix: str) -> None:
    assert validate_takes(uri)
    assert objstore.parse_uri(uri, "f").prefix == prefix


# ---- redaction ------------------------------------------------------------------------------

LEAKS = [
    ("retry (https://AKIA:wJalr@minio:9000/b/k) failed", "retry (https://minio:9000/b/k) failed"),
    ("s3://user:pw@bucket/x and gs://tok@b", "s3://bucket/x and gs://b"),
    ("GET HTTP://K:S@host/?a=b@c", "GET HTTP://host/?a=b@c"),
    ("no url here: user:pw@host", "no url here: user:pw@host"),
    ("https://host/path@not-userinfo", "https://host/path@not-userinfo"),
]


@pytest.mark.parametrize(("text", "shown"), LEAKS)
def test_redact_urls_drops_userinfo_only(text: str, shown: str) -> None:
    assert redact_urls(text) == shown


@pytest.mark.parametrize(("text", "shown"), LEAKS)
def test_every_printer_of_a_url_redacts_it(text: str, shown: str) -> None:
    # The store's messages about a client's error.
    assert objstore.one_line(RuntimeError(text)) == shown
    # The trainer's log lines.
    record = logging.LogRecord("kubegan_trainer", logging.WARNING, "", 0, text, None, None)
    assert RedactingFormatter("[kubegan] %(message)s").format(record) == f"[kubegan] {shown}"
    # `kubegan run`'s console.
    out = io.StringIO()
    _Console(out).line(text)
    assert out.getvalue() == shown + "\n"
    # The operator's conditions.
    status = GANTrainingJobStatus()
    set_condition(status, "Failed", True, "WorkerFailed", text, "2026-01-01T00:00:00Z")
    assert status.conditions[0].message == shown
