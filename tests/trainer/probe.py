"""A worker that checks DDP invariants while training (run as N real processes).

After every optimizer step each rank all-gathers its generator and discriminator
parameters and records the largest difference between ranks. Rank 0 writes the record
and every rank writes its final parameters to $PROBE_OUT.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from kubegan_trainer.__main__ import configure_logging, load_config
from kubegan_trainer.backends.torch.entry import worker
from kubegan_trainer.backends.torch.loop import GanTrainer, params_digest
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.driver import Hooks
from kubegan_trainer.worker.signals import StopFlag


def main() -> int:
    configure_logging()
    env = ClusterEnv.from_environ()
    cfg = load_config(env.config_path)
    out = Path(os.environ["PROBE_OUT"])
    record = {"steps": 0, "max_diff_g": 0.0, "max_diff_d": 0.0, "world": env.world_size}
    trainer_box: list[GanTrainer] = []

    def on_step(trainer: GanTrainer, epoch0: int, step: int, info: dict) -> None:
        trainer_box[:] = [trainer]
        for name, net in (("g", trainer.G), ("d", trainer.D)):
            mine = torch.from_numpy(params_digest(net))
            every = [torch.empty_like(mine) for _ in range(trainer.world)]
            dist.all_gather(every, mine)
            diff = max(float((e - every[0]).abs().max()) for e in every)
            record[f"max_diff_{name}"] = max(record[f"max_diff_{name}"], diff)
        record["steps"] += 1

    code = worker(env, cfg, 0, StopFlag().install(), hooks=Hooks(on_step=on_step))
    trainer = trainer_box[0]
    rank = env.node_rank
    np.save(out / f"g-rank{rank}.npy", params_digest(trainer.G))
    np.save(out / f"d-rank{rank}.npy", params_digest(trainer.D))
    if rank == 0:
        (out / "record.json").write_text(json.dumps(record))
    return code


if __name__ == "__main__":
    sys.exit(main())
