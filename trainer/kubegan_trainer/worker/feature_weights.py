"""The bytes of `spec.quality.featureWeights`: a path in the pod or a bucket object (with the
checkpoint bucket's endpoint and credentials), a regular file of bounded size either way.
What the bytes hold is inception_scores.py's to judge."""

from __future__ import annotations

import os
from collections.abc import Mapping

from kubegan_api.sections import CheckpointSpec

from kubegan_trainer.base.bounded_read import read_regular
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage import objstore

FIELD = "spec.quality.featureWeights"
# InceptionV3's weights are 95 MB; twice that leaves room for another dtype's copy.
WEIGHTS_MAX_BYTES = 256 << 20


def is_bucket(where: str) -> bool:
    return "://" in where


def read_weights(
    where: str,
    checkpoint: CheckpointSpec,
    max_bytes: int = WEIGHTS_MAX_BYTES,
    environ: Mapping[str, str] | None = None,
) -> bytes:
    """The file's bytes; TrainerError (one line naming the field) when it is missing, not a
    regular file, larger than `max_bytes` or unreadable."""
    if not is_bucket(where):
        try:
            return read_regular(where, max_bytes)
        except FileNotFoundError:
            raise TrainerError(f"{FIELD}: {where} does not exist") from None
        except OSError as err:
            raise TrainerError(f"{FIELD}: {where} cannot be read ({err.strerror})") from None
        except TrainerError as err:
            raise TrainerError(f"{FIELD}: {err}") from None
    return _read_object(where, checkpoint, max_bytes, environ)


def _read_object(
    uri: str, checkpoint: CheckpointSpec, max_bytes: int, environ: Mapping[str, str] | None
) -> bytes:
    import obstore
    from obstore.exceptions import NotFoundError

    parsed = objstore.parse_uri(uri, FIELD)
    folder, _, name = parsed.prefix.rpartition("/")
    if not name:
        raise TrainerError(f"{FIELD}: {uri} names a bucket, not an object in it")
    e = os.environ if environ is None else environ
    override, setting = objstore.endpoint_setting(e)
    endpoint = override or checkpoint.endpoint or None
    store = objstore.open_store(
        objstore.BucketUri(parsed.scheme, parsed.bucket, folder),
        endpoint,
        setting if override else "spec.checkpoint.endpoint",
    )
    try:
        size = objstore.call(f"{FIELD} ({uri})", lambda: obstore.head(store, name))["size"]
    except (NotFoundError, FileNotFoundError):
        raise TrainerError(f"{FIELD}: {uri} does not exist") from None
    if size > max_bytes:
        raise TrainerError(f"{FIELD}: {uri} is larger than {max_bytes} bytes")
    if size == 0:
        return b""
    return bytes(
        objstore.call(
            f"{FIELD} ({uri})", lambda: obstore.get_range(store, name, start=0, length=size)
        )
    )
