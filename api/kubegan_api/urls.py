"""Bucket URIs and store endpoints: what a job may write in them, decided once.

Every rule is a `cel.Rule` on the string itself, so `kubegan validate` (pydantic), the
apiserver (the same rules as CEL on the field) and the trainer (`bucket_uri_problems`, which
objstore.parse_uri calls) refuse the same values with the same words. A URL never carries
credentials (they go in the Secret that credentialsSecret names), and every message that
prints a URL goes through `redact_urls`, so a credential that reached one anyway is not
repeated.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from kubegan_api import cel
from kubegan_api.cel import Rule

MAX_URI_LENGTH = 1024
BUCKET_SCHEMES = ("s3", "gs", "az")

# One regex per question, searched (not matched) as CEL's `matches` does in RE2; each reads
# the same in Python's re.
_CREDENTIALS = r"^([^/]*//)?[^/]*@"  # an '@' before the first '/' after the scheme
_SPACE_OR_CONTROL = r"[\x00-\x20\x7f-\x9f]"
_BUCKET_SCHEME = rf"^({'|'.join(BUCKET_SCHEMES)})://"
_BUCKET_NAME = r"^[a-z0-9]+://[a-z0-9][a-z0-9._-]{1,221}[a-z0-9](/|$)"
# An empty, '.' or '..' part of the prefix (one trailing '/' is allowed and dropped).
_BAD_PREFIX = r"^[^/]*//[^/]*/(.*/)?(\.{1,2}(/|$)|/)"
_HTTP_SCHEME = r"^https?://"
_HOST = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
_PORT = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_WITH_HOST = rf"^https?://{_HOST}(:|/|$)"
_WITH_PORT = rf"^https?://{_HOST}(:{_PORT})?(/|$)"

CREDENTIALS_MESSAGE = (
    "must not hold credentials (user:password@); put them in the Secret that "
    "credentialsSecret names"
)


def _has(pattern: str) -> tuple[str, Callable[[str], bool]]:
    """CEL and Python for "the string contains a match of `pattern`"."""
    compiled = re.compile(pattern)
    return f"self.matches({cel.raw_string(pattern)})", lambda s: compiled.search(s) is not None


def _rule(
    message: str,
    *,
    bad: tuple[str, ...] = (),
    good: tuple[str, ...] = (),
    when: tuple[str, ...] = (),
    unless: tuple[str, ...] = (),
) -> Rule:
    """A rule on one string: it holds for "", and where it does not apply (not all of `when`
    match, or one of `unless` does: another rule speaks then); else when none of `bad` and
    all of `good` match."""
    bads, goods, whens, unlesses = ([_has(p) for p in ps] for ps in (bad, good, when, unless))
    skip = ["self == ''", *(c for c, _ in unlesses)]
    if whens:
        skip.append("!(" + " && ".join(c for c, _ in whens) + ")")
    test = " && ".join([*(f"!{c}" for c, _ in bads), *(c for c, _ in goods)])

    def holds(s: str) -> bool:
        if s == "" or any(f(s) for _, f in unlesses) or not all(f(s) for _, f in whens):
            return True
        return not any(f(s) for _, f in bads) and all(f(s) for _, f in goods)

    return Rule("", message, " || ".join([*skip, test]), holds)


CREDENTIALS_RULE = _rule(CREDENTIALS_MESSAGE, bad=(_CREDENTIALS,))
SPACE_RULE = _rule("must not contain spaces or control characters", bad=(_SPACE_OR_CONTROL,))
_SAID = (_CREDENTIALS, _SPACE_OR_CONTROL)  # by the two rules above: the others keep quiet

BUCKET_URI_RULES = (
    CREDENTIALS_RULE,
    SPACE_RULE,
    _rule(
        "must be s3://bucket/prefix, gs://bucket/prefix or az://container/prefix",
        good=(_BUCKET_SCHEME,),
        unless=_SAID,
    ),
    _rule(
        "the bucket or container name must be 3 to 223 lowercase letters, digits, '.', '_' "
        "or '-', starting and ending with a letter or digit",
        good=(_BUCKET_NAME,),
        when=(_BUCKET_SCHEME,),
        unless=_SAID,
    ),
    _rule(
        "the prefix must not have an empty, '.' or '..' part",
        bad=(_BAD_PREFIX,),
        when=(_BUCKET_SCHEME,),
        unless=_SAID,
    ),
)
ENDPOINT_RULES = (
    CREDENTIALS_RULE,
    SPACE_RULE,
    _rule("must start with http:// or https://", good=(_HTTP_SCHEME,), unless=_SAID),
    _rule(
        "must name a host after the scheme",
        good=(_WITH_HOST,),
        when=(_HTTP_SCHEME,),
        unless=_SAID,
    ),
    _rule(
        "the port must be a number from 1 to 65535",
        good=(_WITH_PORT,),
        when=(_WITH_HOST,),
        unless=_SAID,
    ),
)

# A file named by a bucket URI or a path (spec.quality.featureWeights): the bucket rules apply
# to anything with a scheme, a path only has to be one line without spaces.
_ANY_SCHEME = r"^[A-Za-z][A-Za-z0-9+.-]*://"
BUCKET_OR_PATH_RULES = (
    CREDENTIALS_RULE,
    SPACE_RULE,
    _rule(
        "a URI must be s3://bucket/key, gs://bucket/key or az://container/key (or give a path)",
        good=(_BUCKET_SCHEME,),
        when=(_ANY_SCHEME,),
        unless=_SAID,
    ),
    *BUCKET_URI_RULES[3:],  # the bucket's name and the key's parts, as for any bucket URI
)


def _problems(text: str, rules: tuple[Rule, ...]) -> list[str]:
    if len(text) > MAX_URI_LENGTH:
        return [f"at most {MAX_URI_LENGTH} characters"]
    return [r.message for r in rules if not r.holds(text)]


def bucket_uri_problems(text: str) -> list[str]:
    """Why `text` is not a bucket URI a job may name (each broken rule's words), or []."""
    return _problems(text, BUCKET_URI_RULES)


def bucket_or_path_problems(text: str) -> list[str]:
    """Why `text` is neither a bucket URI nor a path a job may name, or []."""
    return _problems(text, BUCKET_OR_PATH_RULES)


def endpoint_problems(text: str) -> list[str]:
    """Why `text` is not an S3-compatible endpoint a job may name, or []."""
    return _problems(text, ENDPOINT_RULES)


def split_bucket_uri(text: str) -> tuple[str, str, str]:
    """(scheme, bucket, prefix) of a URI `bucket_uri_problems` accepts; the prefix has no
    leading or trailing '/'."""
    scheme, _, rest = text.partition("://")
    bucket, _, prefix = rest.partition("/")
    return scheme, bucket, prefix.rstrip("/")


# Userinfo in any URL in a text: `scheme://user:password@` becomes `scheme://`.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@]*@")


def redact_urls(text: str) -> str:
    """`text` with the userinfo of every URL in it removed: every message or log line that
    prints a URL (store retries, conditions, events, `kubegan run`) passes through here."""
    return _USERINFO.sub(r"\1", text)


def _checked(rules: tuple[Rule, ...]) -> Callable[[str], str]:
    def checked(value: str) -> str:
        # One `<field>: <message>` line per broken rule (loading._describe), as the apiserver.
        cel.check(value, rules)
        return value

    return checked


def _schema(rules: tuple[Rule, ...]) -> dict[str, Any]:
    """The rules as the CRD puts them on the field (self = the string), all but the
    credentials rule: the apiserver quotes a string field's value in its refusal, so that rule
    sits on the object holding the field (`credentials_rules`), where it says "object"."""
    on_field = [r for r in rules if r is not CREDENTIALS_RULE]
    return {"x-kubernetes-validations": [{"rule": r.cel, "message": r.message} for r in on_field]}


def credentials_rules(*fields: str) -> tuple[Rule, ...]:
    """The credentials rule for each URI or endpoint field (camelCase names) of an object, as
    CEL on that object so the apiserver never echoes a secret back; in Python the field's own
    validator already refuses it with the same message (hence `holds` is always true)."""
    pattern = cel.raw_string(_CREDENTIALS)
    return tuple(
        Rule(
            f".{name}",
            CREDENTIALS_MESSAGE,
            f"!has(self.{name}) || !self.{name}.matches({pattern})",
            lambda _: True,
        )
        for name in fields
    )


BucketUriText = Annotated[
    str,
    Field(max_length=MAX_URI_LENGTH, json_schema_extra=_schema(BUCKET_URI_RULES)),
    AfterValidator(_checked(BUCKET_URI_RULES)),
]
HttpUrlText = Annotated[
    str,
    Field(max_length=MAX_URI_LENGTH, json_schema_extra=_schema(ENDPOINT_RULES)),
    AfterValidator(_checked(ENDPOINT_RULES)),
]
BucketOrPathText = Annotated[
    str,
    Field(max_length=MAX_URI_LENGTH, json_schema_extra=_schema(BUCKET_OR_PATH_RULES)),
    AfterValidator(_checked(BUCKET_OR_PATH_RULES)),
]
S3Endpoint = Annotated[
    str,
    Field(
        max_length=MAX_URI_LENGTH,
        description="An S3-compatible store's endpoint (s3:// URIs only), http(s)://host[:port]; "
        "no credentials in it (credentialsSecret).",
        json_schema_extra=_schema(ENDPOINT_RULES),
    ),
    AfterValidator(_checked(ENDPOINT_RULES)),
]
