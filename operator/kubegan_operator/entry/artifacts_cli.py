"""`kubegan samples`, `kubegan metrics` and `kubegan export`: a run's artifacts, read where
the trainer stored them (kubegan_trainer.storage.artifacts), without `kubectl exec`.

TARGET is a run directory (what `kubegan run` writes: runs/<name>/), a bucket prefix
(s3://, gs://, az://: a job's `spec.checkpoint.uri`), or the name of a GANTrainingJob on the
cluster of the current kubeconfig, whose `status.artifacts.uri` (else its checkpoint bucket)
says where they are. Buckets are read with the user's own cloud credentials, through the
client the trainer uses (obstore, from the trainer's extras). Artifacts on a claim are read
by mounting the claim; this command says which claim and folder.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from kubegan_operator.api.input_files import InputError
from kubegan_operator.entry.arg_types import name_arg, path_arg

SAMPLES_MAX_BYTES = 64 << 20  # a sample grid is a PNG of a few hundred KiB
METRICS_MAX_BYTES = 64 << 20  # run_history.HISTORY_MAX_BYTES
EXPORT_FILE_MAX_BYTES = 8 << 30  # a generator's weights
_BUCKET = re.compile(r"^(s3|gs|az)://")
_SAMPLE = re.compile(r"^samples/epoch-(\d{4,})\.png$")
CLAIM_SCHEME = "pvc://"


@dataclass
class Source:
    sink: Any  # kubegan_trainer.storage.artifacts.FolderSink or BucketSink
    shown: str  # the target as the user named it, for messages


def open_source(command: str, target: str, namespace: str | None) -> Source:
    """Where TARGET's artifacts are; InputError (one line) when they cannot be reached."""
    from kubegan_trainer.storage.artifacts import FolderSink

    if os.path.isdir(target):
        return Source(FolderSink(Path(target)), target)
    if _BUCKET.match(target):
        return Source(_bucket_sink(command, target, None), target)
    if "/" in target or os.path.lexists(target):
        raise InputError([f"kubegan {command}: {target}: not a run directory"])
    return _job_source(command, target, namespace)


def _bucket_sink(command: str, uri: str, endpoint: str | None) -> Any:
    try:
        from kubegan_trainer.storage import objstore
        from kubegan_trainer.storage.artifacts import BucketSink

        parsed = objstore.parse_uri(uri, "the bucket")
        override, name = objstore.endpoint_setting()
        store = objstore.open_store(parsed, override or endpoint, name)
    except ImportError as err:
        raise InputError(
            [f"kubegan {command}: reading {uri} needs {err.name} (pip install 'kubegan[torch]')"]
        ) from None
    except Exception as err:  # StoreError: a bad URI or endpoint, in one line
        raise InputError([f"kubegan {command}: {err}"]) from None
    return BucketSink(store, parsed)


def _job_source(command: str, name: str, namespace: str | None) -> Source:
    job = _read_job(command, name, namespace)
    ns = (job.get("metadata") or {}).get("namespace", namespace)
    spec_ckpt = (job.get("spec") or {}).get("checkpoint") or {}
    artifacts = (job.get("status") or {}).get("artifacts") or {}
    uri = artifacts.get("uri") or spec_ckpt.get("uri") or ""
    if uri.startswith(CLAIM_SCHEME) or (not uri and spec_ckpt.get("claimName")):
        raise InputError(
            [
                f"kubegan {command}: {ns}/{name} keeps its artifacts on PVC "
                f"{spec_ckpt['claimName']} in the folder {name}/; mount the claim to read them"
            ]
        )
    if not uri:
        raise InputError(
            [
                f"kubegan {command}: {ns}/{name} has neither checkpoint.uri nor claimName: its "
                "artifacts lived in its pods and are gone (condition ArtifactsPersistent)"
            ]
        )
    return Source(_bucket_sink(command, uri, spec_ckpt.get("endpoint") or None), f"{ns}/{name}")


def _read_job(command: str, name: str, namespace: str | None) -> Mapping[str, Any]:
    from kubegan_api.spec import GROUP, PLURAL, VERSION
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from kubegan_operator.runtime.kube import KubeconfigError, load_credentials

    try:
        load_credentials()
    except KubeconfigError as err:
        raise InputError([f"kubegan {command}: {err}"]) from None
    if namespace is None:
        try:
            namespace = config.list_kube_config_contexts()[1]["context"].get("namespace")
        except (config.ConfigException, KeyError, TypeError):
            namespace = None
    namespace = namespace or "default"
    try:
        return client.CustomObjectsApi().get_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, namespace, PLURAL, name
        )
    except ApiException as err:
        if err.status == 404:
            raise InputError([f"kubegan {command}: no GANTrainingJob {namespace}/{name}"]) from None
        raise InputError([f"kubegan {command}: {namespace}/{name}: {err.reason}"]) from None
    except (HTTPError, OSError) as err:
        raise InputError([f"kubegan {command}: the cluster is not reachable ({err})"]) from None


def _store_error(command: str, err: Exception) -> InputError:
    return InputError([f"kubegan {command}: {str(err).splitlines()[0][:300]}"])


# ---- the commands ----------------------------------------------------------------------------
def cmd_samples(args: argparse.Namespace) -> int:
    from kubegan_trainer.base.errors import TrainerError

    src = open_source("samples", args.target, args.namespace)
    try:
        grids = {
            int(m.group(1)): key for key in src.sink.keys("samples") if (m := _SAMPLE.match(key))
        }
        if not grids:
            raise InputError([f"kubegan samples: {src.shown}: no sample grid stored yet"])
        epoch = args.epoch if args.epoch is not None else max(grids)
        if epoch not in grids:
            have = f"epochs {min(grids)}-{max(grids)}" if len(grids) > 1 else f"epoch {max(grids)}"
            raise InputError([f"kubegan samples: {src.shown}: no grid of epoch {epoch} ({have})"])
        data = src.sink.read(grids[epoch], SAMPLES_MAX_BYTES)
    except TrainerError as err:
        raise _store_error("samples", err) from None
    if data is None:
        raise InputError([f"kubegan samples: {src.shown}: {grids[epoch]} cannot be read"])
    out = Path(args.output or ".")
    out.mkdir(parents=True, exist_ok=True)
    dest = out / PurePosixPath(grids[epoch]).name
    dest.write_bytes(data)
    print(dest)
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    from kubegan_trainer.base.errors import TrainerError
    from kubegan_trainer.launch.summary import summary_table
    from kubegan_trainer.worker.run_history import parse_rows

    src = open_source("metrics", args.target, args.namespace)
    try:
        data = src.sink.read("metrics.jsonl", METRICS_MAX_BYTES)
    except TrainerError as err:
        raise _store_error("metrics", err) from None
    if data is None:
        raise InputError([f"kubegan metrics: {src.shown}: no metrics.jsonl stored yet"])
    rows, other = parse_rows(data)
    print(summary_table(rows, other))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """The export the run wrote when it finished; for a run folder without one (still
    training, stopped), its best checkpoint's generator exported here and now."""
    from kubegan_trainer.base.errors import TrainerError
    from kubegan_trainer.storage.artifacts import FolderSink

    src = open_source("export", args.target, args.namespace)
    out = Path(args.output or "export")
    try:
        keys = _export_keys(src)
        if not keys and isinstance(src.sink, FolderSink):  # a run folder: export it now
            from kubegan_trainer.launch.export_run import export_run_folder

            print(export_run_folder(src.sink.root, out))
            return 0
        if not keys:
            raise InputError(
                [
                    f"kubegan export: {src.shown}: no exported generator yet (the trainer "
                    "writes export/ when training finishes)"
                ]
            )
        for key in keys:
            data = src.sink.read(key, EXPORT_FILE_MAX_BYTES)
            if data is None:
                raise InputError([f"kubegan export: {src.shown}: {key} cannot be read"])
            dest = out.joinpath(*PurePosixPath(key).parts[1:])
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    except TrainerError as err:
        raise _store_error("export", err) from None
    print(out)
    return 0


def _export_keys(src: Source) -> list[str]:
    """Every file under export/ (a SavedModel is a folder tree), as safe relative keys."""
    from kubegan_trainer.storage.artifacts import FolderSink

    if isinstance(src.sink, FolderSink):
        keys = []
        top = src.sink.root / "export"
        for base, dirs, files in os.walk(top):  # never follows a symlinked folder
            for name in files:
                path = Path(base) / name
                if stat.S_ISREG(os.lstat(path).st_mode):
                    keys.append(path.relative_to(src.sink.root).as_posix())
            dirs[:] = [d for d in dirs if not (Path(base) / d).is_symlink()]
        return sorted(keys)
    return [k for k in src.sink.keys("export") if _safe_key(k)]


def _safe_key(key: str) -> bool:
    """A bucket key that stays inside the output folder when written there."""
    parts = PurePosixPath(key).parts
    return (
        len(parts) > 1 and not key.startswith("/") and all(p not in ("", ".", "..") for p in parts)
    )


def add_artifact_commands(sub: Any) -> None:
    """The three commands, on the `kubegan` parser's subcommands."""
    target_help = "a run directory, a bucket prefix (s3://, gs://, az://) or a job's name"
    for name, func, helptext in (
        ("samples", cmd_samples, "download the latest (or --epoch N) sample grid"),
        ("metrics", cmd_metrics, "print the epoch table of a run"),
        ("export", cmd_export, "download the exported generator (safetensors or SavedModel)"),
    ):
        p = sub.add_parser(name, help=helptext, description=f"{helptext}. TARGET: {target_help}.")
        p.add_argument("target", metavar="NAME|DIR", type=path_arg, help=target_help)
        p.add_argument("-n", "--namespace", type=name_arg, help="the job's namespace")
        if name != "metrics":
            default = "." if name == "samples" else "./export"
            p.add_argument(
                "-o",
                "--output",
                metavar="DIR",
                type=path_arg,
                help=f"where to write (default {default})",
            )
        if name == "samples":
            p.add_argument("--epoch", type=_epoch_arg, metavar="N", help="the grid of epoch N")
        p.set_defaults(func=func)


def _epoch_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an epoch number") from None
    if not 1 <= value < 10**9:
        raise argparse.ArgumentTypeError(f"{value} is not an epoch number (1 or more)")
    return value
