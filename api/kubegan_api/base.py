"""What every section of the API is built from: the base model, int64 bounds, the error type
for problems below a field, and the name patterns Kubernetes and the clouds impose.

Field names are camelCase in YAML/JSON (DESIGN §2); Python attributes are snake_case.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# The apiserver's integers are int64: a larger number in a job can never reach a cluster.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# The pydantic error type for problems below the validated object: its context holds `rules`,
# (sub-path, message) pairs that `kubegan validate` prints one line each (operator's
# loading.py), and `message`, the same lines joined, which the trainer prints.
FIELD_PROBLEMS = "cross_field"


class ApiModel(BaseModel):
    """Base for every API section: camelCase aliases, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
        allow_inf_nan=False,
        use_enum_values=False,
    )

    def to_api(self) -> dict[str, Any]:
        """The camelCase JSON form, as it appears in YAML and in the trainer's config file."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# ---- names -----------------------------------------------------------------------------------

DNS_1035_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

# Label keys (an optional DNS subdomain prefix and a name) and values, as Kubernetes has them.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
_DNS_1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_LABEL_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
MAX_ANNOTATIONS_BYTES = 256 * 1024  # the apiserver's limit on all annotations together

# A container image reference (distribution/reference's grammar):
# [host[:port]/]path[:tag][@digest].
_HOST_PART = r"[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?"
_IMAGE_HOST = rf"{_HOST_PART}(\.{_HOST_PART})*(:[0-9]+)?"
_IMAGE_PATH = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_IMAGE_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_IMAGE_DIGEST = r"[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_PATTERN = (
    rf"^$|^({_IMAGE_HOST}/)?{_IMAGE_PATH}(/{_IMAGE_PATH})*(:{_IMAGE_TAG})?(@{_IMAGE_DIGEST})?$"
)
# A TPU slice shape: 2 or 3 dimensions, each 1, 2 or a multiple of 4 (GKE's v4/v5e/v5p/v6e
# shapes), so that a slice is a whole number of hosts of 4 chips or a single host.
_TPU_DIM = r"([124]|8|[2468][048]|[13579][26])"
TPU_TOPOLOGY_PATTERN = rf"^{_TPU_DIM}(x{_TPU_DIM}){{1,2}}$"

# A PersistentVolumeClaim name (DNS-1123 subdomain), or empty for none.
CLAIM_NAME_PATTERN = r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ENTRYPOINT_PATTERN = r"^$|^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
# The claim and Secret fields that the data and checkpoint sections both have, written once
# (their bucket URI and endpoint types are kubegan_api.urls').
ObjectName = Annotated[str, Field(max_length=253, pattern=CLAIM_NAME_PATTERN)]


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes label/annotation key ([prefix/]name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and re.fullmatch(_DNS_1123_SUBDOMAIN, prefix)):
        return "its prefix must be a DNS subdomain of at most 253 characters"
    if not (len(name) <= 63 and re.fullmatch(_LABEL_NAME, name)):
        return (
            "its name must be at most 63 characters of letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    return None
