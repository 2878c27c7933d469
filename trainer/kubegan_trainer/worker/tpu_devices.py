"""Whether this container sees a TPU: the device files a TPU VM host exposes (and GKE's TPU
device plugin passes into a pod that requests `google.com/tpu`). Checked before TensorFlow is
imported: tensorflow-tpu starts libtpu at import, and libtpu without a TPU does not fail, it
retries its metadata lookups for good."""

from __future__ import annotations

import os
from pathlib import Path

from kubegan_api.contract import ENV_TPU_WORKER_HOSTNAMES, ENV_TPU_WORKER_ID
from kubegan_api.sections import TrainerConfig

from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.distribution import TPU, decide_strategy

DEV = Path("/dev")
# A TPU reached by name (the TPU Node API, TPUClusterResolver(tpu=$TPU_NAME)) is not local.
ENV_TPU_NAME = "TPU_NAME"


def tpu_devices(dev: Path = DEV) -> list[str]:
    """The TPU device files under `dev`: accel<N> (TPU v2-v4) and vfio/<N> (v5e, v5p, v6e;
    the bare vfio/vfio control file is not a TPU)."""
    found = [p for p in dev.glob("accel*") if p.name[len("accel") :].isdigit()]
    vfio = dev / "vfio"
    if vfio.is_dir():
        found += [p for p in vfio.iterdir() if p.name.isdigit()]
    return sorted(str(p) for p in found)


def no_tpu_reason(dev: Path = DEV) -> str | None:
    """None when a TPU device is present, else the words that say none was found."""
    if tpu_devices(dev):
        return None
    return (
        f"no TPU was found ({dev}/accel<N> and {dev}/vfio/<N> are missing: is this a TPU node "
        "and does the pod request google.com/tpu?)"
    )


def unreachable_prefix(env: ClusterEnv) -> str:
    hosts = ",".join(env.tpu_worker_hostnames) or "-"
    where = f"{ENV_TPU_WORKER_ID}={env.tpu_worker_id}, {ENV_TPU_WORKER_HOSTNAMES}={hosts}"
    return f"spec.strategy: tpu, but no TPU is reachable from this worker ({where})"


def missing_tpu(
    config: TrainerConfig, env: ClusterEnv, environ: dict[str, str] | None = None, dev: Path = DEV
) -> str | None:
    """The one line a TPU worker without a local TPU stops with, or None: not a TPU job, a
    TPU reached by name, or a TPU device present."""
    e = os.environ if environ is None else environ
    on_tpu = env.tpu_worker_id is not None
    if decide_strategy(config.framework, config.strategy, 1, on_tpu) != TPU or e.get(ENV_TPU_NAME):
        return None
    reason = no_tpu_reason(dev)
    return f"{unreachable_prefix(env)}: {reason}" if reason else None
