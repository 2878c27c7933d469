"""TensorFlow checkpoints in the framework-free store (`kubegan_trainer.storage.folder`), the
same contract as PyTorch's: one folder per position (`ckpt-<epoch>-<step>/`), written
aside and renamed into place, a manifest with a sha256 per file written last, keep-N
pruning that never removes a good checkpoint before a newer good one exists, and on
resume the newest intact one, a damaged newer one moved to `corrupt/` with a warning.

- The folder holds `tf.train.Checkpoint.write`'s files (`state.index`,
  `state.data-*`): both networks, both optimizers (loss scale included), the
  `tf.random.Generator` and the loop's position and running sums.
- Data only: `tf.train.Checkpoint.read` assigns values to the variables this job built;
  nothing in the files names code to run (no pickle, no Keras deserialization), and no
  `checkpoint` state file is consulted, so nothing can point the trainer elsewhere.
- Multi-worker: saving may involve collectives, so every worker writes; other workers
  write into a scratch folder that is deleted right away, as TF recommends. Only the
  chief changes the checkpoint directory (moves damaged checkpoints aside, prunes).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import tensorflow as tf
from kubegan_api.sections import CheckpointSpec

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage.store import CheckpointRef, Position, Store
from kubegan_trainer.storage.sync import open_checkpoint_store

log = logging.getLogger("kubegan_trainer")

STATE_PREFIX = "state"


class TfCheckpoints:
    def __init__(
        self,
        directory: Path,
        keep: int,
        checkpoint: tf.train.Checkpoint,
        worker_index: int,
        spec: CheckpointSpec | None = None,
    ) -> None:
        self.chief = worker_index == 0
        self.checkpoint = checkpoint
        # The folder, or the folder as the local copy of the job's bucket (storage/sync.py).
        self.store: Store = open_checkpoint_store(
            Path(directory), keep, warn=log.warning, writer=self.chief, spec=spec
        )
        self.scratch = Path(directory) / f".worker-{worker_index}-scratch"

    def save(self, pos: Position, extra: dict[str, Any]) -> None:
        if not self.chief:
            self.checkpoint.write(str(self.scratch / STATE_PREFIX))
            shutil.rmtree(self.scratch, ignore_errors=True)
            return
        staging = self.store.begin(pos)
        try:
            self.checkpoint.write(str(staging / STATE_PREFIX))
            self.store.commit(staging, pos, extra=extra)
        except BaseException:
            self.store.abort(staging)
            raise

    def latest_valid(self) -> CheckpointRef | None:
        if self.chief:
            self.store.clean_staging()
        return self.store.latest_valid()

    def restore(self, ref: CheckpointRef) -> None:
        prefix = ref.path / STATE_PREFIX
        try:
            status = self.checkpoint.read(str(prefix))
            status.assert_existing_objects_matched()
        except (tf.errors.OpError, AssertionError, ValueError) as err:
            first = str(err).strip().splitlines()[0][:200]
            raise TrainerError(
                f"checkpoint {ref.path} does not fit this job's model or optimizers ({first})"
            ) from None
