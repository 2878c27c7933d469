"""The `kubegan` command line's argument types: each refuses a value argparse would pass on
(an empty path or name, a namespace that is no DNS label, a label Kubernetes would refuse)
with one line naming what is wrong."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from kubegan_api.reserved import owned_label_key


def path_arg(text: str) -> str:
    """A file or directory argument. An empty one is refused by name: Path("") is ".",
    which gave "kubegan validate: .: is a directory" for `kubegan validate ""`."""
    if not text:
        raise argparse.ArgumentTypeError("the path is empty")
    return text


def name_arg(text: str) -> str:
    """A Kubernetes name argument (namespace, Lease): empty is refused, not sent."""
    if not text:
        raise argparse.ArgumentTypeError("the name is empty")
    return text


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# A label key (optional DNS-subdomain prefix, a name of at most 63) and value, as Kubernetes
# allows them; the value may be empty.
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-_.A-Za-z0-9]{0,61}[A-Za-z0-9])?")


def _is_dns_label(name: str) -> bool:
    return len(name) <= 63 and _DNS_LABEL.fullmatch(name) is not None


def _namespace_and_name(
    text: str, form: str, name_problem: Callable[[str], str | None]
) -> tuple[str, str]:
    """A NAMESPACE=NAME option value, split. The namespace is checked here so that every
    such option refuses the same values with the same words; `name_problem` says what is
    wrong with NAME, if anything. `form` is the option's metavar, for the error."""
    namespace, sep, name = text.partition("=")
    if not sep or not _is_dns_label(namespace):
        problem = f"namespace {namespace!r} is not a DNS label"
    else:
        problem = name_problem(name)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text!r} is not {form} ({problem})")
    return namespace, name


def default_queue_arg(text: str) -> tuple[str, str]:
    """NAMESPACE=LOCALQUEUE: Kueue's queue for the jobs of a namespace that name none."""
    return _namespace_and_name(
        text,
        "NAMESPACE=LOCALQUEUE",
        lambda queue: None if _is_dns_label(queue) else f"LocalQueue {queue!r} is not a DNS label",
    )


def worker_identity_arg(text: str) -> tuple[str, str]:
    """NAMESPACE=SERVICEACCOUNT: who workers of a namespace's jobs naming none run as."""
    return _namespace_and_name(
        text,
        "NAMESPACE=SERVICEACCOUNT",
        lambda account: (
            None
            if len(account) <= 253 and _DNS_SUBDOMAIN.fullmatch(account)
            else f"{account!r} is not a ServiceAccount name"
        ),
    )


def _label_key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"label key prefix {prefix!r} is not a DNS subdomain"
    if not _LABEL_NAME.fullmatch(name):
        return f"label key {key!r} is not a label name"
    return None


def worker_identity_label_arg(text: str) -> tuple[str, str, str]:
    """NAMESPACE=KEY=VALUE: a label the workers running as that namespace's identity get."""
    namespace, _, rest = text.partition("=")
    key, sep, value = rest.partition("=")
    if not sep or not _is_dns_label(namespace):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE=KEY=VALUE")
    problem = _label_key_problem(key)
    owner = owned_label_key(key) if problem is None else None
    if owner is not None:
        problem = (
            f"label key {key!r} is under {owner}/, which Kubernetes, Kueue and kubegan keep "
            "for themselves"
        )
    if problem is None and value and not _LABEL_NAME.fullmatch(value):
        problem = f"label value {value!r} is not a label value"
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE=KEY=VALUE ({problem})")
    return namespace, key, value


def priority_class_arg(text: str) -> str:
    """A PriorityClass name (--allow-priority-class): a DNS subdomain."""
    if not (len(text) <= 253 and _DNS_SUBDOMAIN.fullmatch(text)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a PriorityClass name")
    return text


def progress_seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 1 <= value <= 3600:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds from 1 to 3600")
    return value


def worker_count_arg(text: str) -> int:
    """`kubegan run --workers N`: a whole number of workers (the job's range is checked
    against its spec later)."""
    if not (text.isdigit() and len(text) <= 6 and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of workers (1 or more)")
    return int(text)
