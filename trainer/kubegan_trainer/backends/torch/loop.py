"""The distributed GAN training loop (one process per device).

Per iteration, with k = gradientAccumulationSteps micro-batches of batchSizePerReplica,
the task's schedule (kubegan_trainer.worker.phases, shared with the TensorFlow backend; most
models: one D update, one G update; 3DGAN: D on real, D on fake, two G updates with fresh
noise). D's fakes are generated once per iteration. Each update:

  D: score real and *detached* fakes with the phase's loss method, backward loss / k;
     DDP all-reduces only on the last micro-batch (`no_sync` before). Unscale, clip, step.
  G: freeze D, score fakes through the bare D module (no DDP reducer for a network that
     gets no gradient), backward loss / k under G's DDP wrapper with the same `no_sync`
     rule. Unscale, clip, step. `scaler.update()` once per round of updates.

With k = 1 the D phase's fakes (with their graph) are reused by the first G update,
saving a generator forward; with k > 1 the fakes are made under no_grad and the G phase
regenerates from the same inputs, so memory stays that of one micro-batch.

After every step the ranks agree (one tiny all-reduce on a CPU/gloo group, which never
waits on the GPU stream) on the driver's two flags: stop (SIGTERM on any rank) and
"interval checkpoint due" (rank 0's clock). Epochs, checkpoint positions and reporting
are the framework-free driver's (`kubegan_trainer.worker.driver`); this class is its PyTorch
backend. Checkpoints are collective; rank 0 writes them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from kubegan_api.sections import TrainerConfig
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel as DDP

from kubegan_trainer.backends.torch import rng
from kubegan_trainer.backends.torch.compiling import compile_networks
from kubegan_trainer.backends.torch.data import RankBatches, Step
from kubegan_trainer.backends.torch.models import Batch, GanTask
from kubegan_trainer.backends.torch.noise import micro_keys, noise_generator
from kubegan_trainer.backends.torch.optim import make_optimizer
from kubegan_trainer.backends.torch.payload import load_payload
from kubegan_trainer.backends.torch.precision import autocast, make_scaler
from kubegan_trainer.backends.torch.stabilizers import Stabilizers
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.base.model_settings import settings
from kubegan_trainer.data import Dataset
from kubegan_trainer.data.stream import ShardPlan
from kubegan_trainer.storage.folder import CheckpointStore
from kubegan_trainer.storage.store import CheckpointRef, Position, Store
from kubegan_trainer.storage.sync import open_checkpoint_store
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.driver import Driver, Flags, Generated, Hooks, LoopState, StepResult
from kubegan_trainer.worker.elastic import data_position, resume_step, saved_position
from kubegan_trainer.worker.run_end import run_to_end
from kubegan_trainer.worker.signals import StopFlag

log = logging.getLogger("kubegan_trainer")

STATE_FILE = "state.pt"
CHECKPOINT_FORMAT = 2  # 2: tensors and plain data only (weights_only loading)
# The in-memory data order (data/order.py); checkpoints without it dealt a DistributedSampler's.
DATA_ORDER_KEY, DATA_ORDER = "data_order", "global"


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    ctrl_group: Any = None  # a gloo group for control messages; None = the default group


@dataclass
class StepStats:
    g_loss: Tensor
    d_loss: Tensor
    grad_norms: dict[str, float] = field(default_factory=dict)


class GanTrainer:
    def __init__(
        self,
        config: TrainerConfig,
        env: ClusterEnv,
        dist_info: DistInfo,
        task: GanTask,
        dataset: Dataset,
        stop: StopFlag,
        hooks: Hooks | None = None,
        shards: ShardPlan | None = None,
    ) -> None:
        """`shards`: the data set streamed per rank (data/stream.py); `dataset` is then its
        first shard only, for samples."""
        self.config, self.env, self.dist, self.task = config, env, dist_info, task
        self.dataset, self.stop, self.hooks, self.shards = dataset, stop, hooks, shards
        t = config.training
        self.device = dist_info.device
        self.rank0 = self.chief = dist_info.rank == 0
        self.rank = dist_info.rank
        self.world = self.world_size = dist_info.world_size
        self.data_kind = dataset.kind
        self.k = t.gradient_accumulation_steps
        self.batch = t.batch_size_per_replica
        self.clip = t.gradient_clip_norm
        self.precision = t.mixed_precision
        self.output = Path(env.output_dir)

        self._place_networks(task)
        self.opt_g = make_optimizer(self.G.parameters(), t.generator, t.zero)
        self.opt_d = make_optimizer(self.D.parameters(), t.discriminator, t.zero)
        self.scaler = make_scaler(self.precision, self.device)
        self.input = RankBatches(
            config, dataset, shards, self.rank, self.world, self.device, self._to_device
        )
        self.samples_per_step = self.input.samples_per_step
        self.steps_per_epoch = self.input.steps_per_epoch
        self._training_options(tuple(dataset.arrays))
        self.phase_log: list[str] | None = None  # tests: the optimizer updates, in order
        self.global_step = 0  # optimizer steps done: the noise's key (noise.py)
        # Rank 0 writes checkpoints (and talks to the bucket, if the job names one).
        root, keep = Path(env.checkpoint_dir), config.checkpoint.keep
        self.store: Store = (
            open_checkpoint_store(root, keep, log.warning, spec=config.checkpoint)
            if self.rank0
            else CheckpointStore(root, keep, log.warning)
        )

    # ---- set-up helpers ----------------------------------------------------------------
    def _place_networks(self, task: GanTask) -> None:
        """G and D on this rank's device (channels-last where it pays), each in its own DDP
        wrapper when there are peers."""
        self.channels_last = self._want_channels_last()
        fmt = self._memory_format()
        self.G = (
            task.generator.to(self.device, memory_format=fmt)
            if fmt
            else task.generator.to(self.device)
        )
        self.D = (
            task.discriminator.to(self.device, memory_format=fmt)
            if fmt
            else task.discriminator.to(self.device)
        )
        if self.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            # One wrapper per network: a single DDP around both would reduce gradients of
            # the network that is not being stepped and breaks the adversarial phases.
            # broadcast_buffers=False: D runs twice (real, fake) before one backward, and
            # re-broadcasting BatchNorm buffers in between would modify tensors autograd
            # saved. Running statistics stay per-rank (they never affect training-mode
            # outputs); checkpoints and samples use rank 0's.
            self.G_ddp: nn.Module = DDP(self.G, device_ids=ids, broadcast_buffers=False)
            self.D_ddp: nn.Module = DDP(self.D, device_ids=ids, broadcast_buffers=False)
        else:
            self.G_ddp, self.D_ddp = self.G, self.D

    def _training_options(self, data_keys: tuple[str, ...]) -> None:
        """EMA, R1, DiffAugment and the schedules (stabilizers.py), then torch.compile: the
        average is copied from the eager generator, and stays eager."""
        self.stab = Stabilizers(
            self.config,
            self.task,
            {"generator": self.opt_g, "discriminator": self.opt_d},
            self.rank,
            self.samples_per_step,
            self.steps_per_epoch,
            data_keys,
        )
        if self.config.training.compile:
            compile_networks((self.G, self.D), self.device)

    def _want_channels_last(self) -> bool:
        if self.config.training.compile:
            # Inductor lays convolutions out channels-last itself (layout_optimization), and
            # channels-last parameters under it broke dcgan's backward on an H100 (torch 2.11:
            # the 1x1-input ConvTranspose weight gradient came back contiguous, the compiled
            # graph asserted channels-last): bench/results/2026-11-27-gpu-check-h100.md.
            if self.config.training.channels_last:
                log.info("training.channelsLast: left to torch.compile's layout optimization")
            return False
        if self.config.training.channels_last is not None:
            return self.config.training.channels_last
        model = self.config.model
        opt = settings(model.name.value, model.options)["channelsLast"]
        if opt == "auto":  # a win for convolutions with tensor cores; not on CPU
            return self.device.type == "cuda"
        return bool(opt)

    def _memory_format(self) -> torch.memory_format | None:
        if not self.channels_last:
            return None
        return torch.channels_last_3d if self.task.spatial_dims == 3 else torch.channels_last

    def _to_device(self, t: Tensor) -> Tensor:
        t = t.to(self.device, non_blocking=True)
        fmt = self._memory_format()
        if fmt is not None and t.dim() == (5 if fmt == torch.channels_last_3d else 4):
            t = t.contiguous(memory_format=fmt)
        return t

    def _batch(self, idx: Tensor) -> Batch:
        return self.input.batch_at(idx)

    # ---- one optimizer step --------------------------------------------------------------
    def _sync_ctx(self, module: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
        if sync or not isinstance(module, DDP):
            return contextlib.nullcontext()
        return module.no_sync()

    def _apply(self, opt: torch.optim.Optimizer, module: nn.Module) -> float:
        """Unscale (fp16), clip the global norm, step. Returns the pre-clip norm or nan."""
        norm = float("nan")
        if self.clip is not None:
            self.scaler.unscale_(opt)  # clip true gradients, not scaled ones
            norm = float(torch.nn.utils.clip_grad_norm_(module.parameters(), self.clip))
        self.scaler.step(opt)
        return norm

    def _inputs(self, micro: list[Batch], keys: list[int] | None, draw: int) -> list[Batch]:
        """Each micro-batch's generator inputs: drawn for its examples (noise.py) when its
        `keys` are known, from the global RNG otherwise (tools that step by hand)."""
        if keys is None:
            return [self.task.generator_inputs(b) for b in micro]
        seed, step = self.config.training.seed, self.global_step
        return [
            self.task.generator_inputs(b, rng=noise_generator(seed, step, key, draw))
            for b, key in zip(micro, keys, strict=True)
        ]

    def train_step(self, micro: list[Batch], keys: list[int] | None = None) -> StepStats:
        """One optimizer step: the task's schedule (worker/phases.py), phase by phase.
        `keys`: each micro-batch's noise key (noise.micro_keys)."""
        task, sched = self.task, self.task.schedule
        draws = 0
        inputs = self._inputs(micro, keys, draws)
        # k = 1 and fakes made in training mode: the first G update without fresh inputs
        # reuses D's fakes, graph and all, saving a generator forward.
        keep_graph = len(micro) == 1 and sched.d_fakes_training
        fakes = self._d_fakes(inputs, keep_graph, sched.d_fakes_training)
        reusable = fakes[0] if keep_graph else None
        zero = torch.zeros((), device=self.device)
        totals = {"discriminator": zero, "generator": zero}
        norms: dict[str, float] = {}
        stepped: set[str] = set()
        r1_due = iter(self.stab.r1_due(sched.real_d_updates()))
        for phase in sched.phases:
            score = getattr(task, phase.loss)
            for _ in range(phase.repeats):
                if phase.fresh_inputs:
                    draws += 1
                    inputs, reusable = self._inputs(micro, keys, draws), None
                if phase.network in stepped:
                    # GradScaler steps each optimizer once per update(): a second update of
                    # the same network in this step closes the previous scaler round.
                    self.scaler.update()
                    stepped.clear()
                if phase.network == "discriminator":
                    r1 = phase.sees_real and next(r1_due)
                    loss, norms["discriminator"] = self._update_d(score, micro, inputs, fakes, r1)
                else:
                    loss, norms["generator"] = self._update_g(score, micro, inputs, reusable)
                    reusable = None  # its graph is spent
                totals[phase.network] = totals[phase.network] + loss
                stepped.add(phase.network)
                if self.phase_log is not None:
                    self.phase_log.append(f"{phase.network}:{phase.loss}")
        self.scaler.update()
        self.stab.after_step(self.G)
        return StepStats(
            totals["generator"] / sched.count("generator"),
            totals["discriminator"] / sched.count("discriminator"),
            norms,
        )

    def _d_fakes(self, inputs: list[Batch], keep_graph: bool, training: bool) -> list[Tensor]:
        """The fakes every D phase of this step scores (made once, as in 3DGAN)."""
        ac = autocast(self.precision, self.device)
        if keep_graph:
            with ac:
                return [self.task.generate(self.G_ddp, inputs[0])]
        self.G.train(training)
        try:
            with torch.no_grad(), ac:
                return [self.task.generate(self.G, inp) for inp in inputs]
        finally:
            self.G.train(True)

    def _update_d(
        self,
        score: Callable[..., Tensor],
        micro: list[Batch],
        inputs: list[Batch],
        fakes: list,
        r1: bool = False,
    ) -> tuple[Tensor, float]:
        """`r1`: this update carries the lazy R1 penalty (not part of the reported loss)."""
        k, total = len(micro), torch.zeros((), device=self.device)
        d = self.stab.seen_by_d(self.D_ddp)  # augmented when DiffAugment is on
        self.opt_d.zero_grad(set_to_none=True)
        for i, (b, inp, fake) in enumerate(zip(micro, inputs, fakes, strict=True)):
            with self._sync_ctx(self.D_ddp, i == k - 1), autocast(self.precision, self.device):
                loss = score(d, b, fake.detach(), inp)
                reg = self.stab.r1_term(d, b, self.scaler) if r1 else 0.0
            self.scaler.scale((loss + reg) / k).backward()
            total += loss.detach()
        self.stab.before_update("discriminator")
        return total / k, self._apply(self.opt_d, self.D)

    def _update_g(
        self,
        score: Callable[..., Tensor],
        micro: list[Batch],
        inputs: list[Batch],
        reuse: Tensor | None,
    ) -> tuple[Tensor, float]:
        """Through the bare, frozen D: no DDP reducer for a network that gets no gradient."""
        k, total = len(micro), torch.zeros((), device=self.device)
        self.D.requires_grad_(False)
        self.opt_g.zero_grad(set_to_none=True)
        try:
            for i, (b, inp) in enumerate(zip(micro, inputs, strict=True)):
                with self._sync_ctx(self.G_ddp, i == k - 1), autocast(self.precision, self.device):
                    fake = reuse if reuse is not None else self.task.generate(self.G_ddp, inp)
                    loss = score(self.stab.seen_by_d(self.D), b, fake, inp)
                self.scaler.scale(loss / k).backward()
                total += loss.detach()
        finally:
            self.D.requires_grad_(True)
        self.stab.before_update("generator")
        return total / k, self._apply(self.opt_g, self.G)

    # ---- control-plane collectives -------------------------------------------------------
    def _agree(self, stop: bool, due: bool) -> tuple[bool, bool]:
        if self.world == 1:
            return stop, due
        flags = torch.tensor([int(stop), int(due)], dtype=torch.int64)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.dist.ctrl_group)
        return bool(flags[0]), bool(flags[1])

    def _broadcast(self, obj: Any) -> Any:
        if self.world == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.dist.ctrl_group)
        return box[0]

    def _barrier(self) -> None:
        if self.world > 1:
            dist.barrier(group=self.dist.ctrl_group)

    # ---- checkpoints ---------------------------------------------------------------------
    def save(self, pos: Position, state: LoopState, extra: dict[str, Any] | None = None) -> None:
        """Collective: every rank contributes its RNG state; rank 0 writes (`extra` into the
        manifest)."""
        # Per-rank state: RNG streams and this epoch's loss sums differ between ranks.
        mine = {
            "rng": rng.capture(self.device),
            # BatchNorm running statistics are per rank (broadcast_buffers=False), and a
            # schedule that makes D's fakes in eval mode (gan3d) reads them: each rank's own.
            "buffers": {
                f"{net}.{k}": v.detach().cpu()
                for net, m in (("generator", self.G), ("discriminator", self.D))
                for k, v in m.named_buffers()
            },
            **self.stab.rank_state(),
            "epoch_acc": {
                "g_sum": torch.as_tensor(state.g_sum).cpu(),
                "d_sum": torch.as_tensor(state.d_sum).cpu(),
                "steps": state.steps,
                "elapsed": state.elapsed,
            },
        }
        states = [mine]
        if self.world > 1:
            states = [None] * self.world
            dist.all_gather_object(states, mine, group=self.dist.ctrl_group)
        for opt in (self.opt_g, self.opt_d):
            if hasattr(opt, "consolidate_state_dict"):  # ZeRO: gather shards on rank 0
                opt.consolidate_state_dict(to=0)
        if self.rank0:
            self._write(pos, self._payload(pos, state, states), extra)
        self._barrier()

    def _payload(self, pos: Position, state: LoopState, ranks: list[Any]) -> dict[str, Any]:
        """Rank 0: everything state.pt holds (data only), `ranks` each rank's own state."""
        return {
            "format": CHECKPOINT_FORMAT,
            "position": {"epoch": pos.epoch, "step": pos.step},
            "global_step": state.global_step,
            "world_size": self.world,
            "generator": self.G.state_dict(),
            "discriminator": self.D.state_dict(),
            "opt_g": self.opt_g.state_dict(),
            "opt_d": self.opt_d.state_dict(),
            "scaler": self.scaler.state_dict(),
            "ranks": ranks,
            "model": self.config.model.to_api(),
            DATA_ORDER_KEY: DATA_ORDER,
            **data_position(pos.step, self.samples_per_step),
            **self.stab.state(),
        }

    def _write(self, pos: Position, payload: dict[str, Any], extra: dict[str, Any] | None) -> None:
        """Rank 0: state.pt staged, then committed with its manifest (`extra` in it)."""
        staging = self.store.begin(pos)
        try:
            torch.save(payload, staging / STATE_FILE)
            self.store.commit(
                staging,
                pos,
                extra={
                    "world_size": self.world,
                    "framework": "pytorch",
                    **data_position(pos.step, self.samples_per_step),
                    **(extra or {}),
                },
            )
        except BaseException:
            self.store.abort(staging)
            raise

    def resume(self) -> tuple[Position, LoopState]:
        """Load the latest valid checkpoint (if any) on every rank; returns where to go on."""
        decision: dict[str, Any] = {"name": None}
        if self.rank0:
            self.store.clean_staging()
            try:
                ref = self.store.latest_valid()
                decision = {"name": ref.name if ref else None}
            except TrainerError as err:
                decision = {"error": str(err)}
        decision = self._broadcast(decision)
        if "error" in decision:
            raise TrainerError(decision["error"])
        if decision["name"] is None:
            return Position(0, 0), LoopState()
        path = Path(self.env.checkpoint_dir) / decision["name"] / STATE_FILE
        # Workers may or may not share the checkpoint volume: each reads it where every
        # rank can see it, otherwise rank 0 reads it and sends it.
        missing, _ = self._agree(not path.is_file(), False)
        payload, problem = None, ""
        if self.rank0 or not missing:
            try:
                payload = load_payload(path)
            except TrainerError as err:
                problem = str(err)
        problems = [problem]
        if self.world > 1:
            problems = [None] * self.world
            dist.all_gather_object(problems, problem, group=self.dist.ctrl_group)
        bad = next((p for p in problems if p), None)
        if bad:
            raise TrainerError(bad)
        if missing:
            payload = self._broadcast(payload)
        return self._apply_payload(payload, path)

    def _apply_payload(self, payload: dict[str, Any], path: Path) -> tuple[Position, LoopState]:
        if payload.get("format") != CHECKPOINT_FORMAT:
            raise TrainerError(
                f"checkpoint {path} has format {payload.get('format')!r}, this trainer reads "
                f"format {CHECKPOINT_FORMAT}"
            )
        try:
            self.G.load_state_dict(payload["generator"])
            self.D.load_state_dict(payload["discriminator"])
            self.opt_g.load_state_dict(payload["opt_g"])
            self.opt_d.load_state_dict(payload["opt_d"])
            self.scaler.load_state_dict(payload["scaler"])
            self.stab.load(payload)
            pos = Position(**payload["position"])
            global_step = int(payload["global_step"])
            same_world = payload["world_size"] == self.world
            ranks = payload["ranks"]
            mine = ranks[self.dist.rank if same_world else 0]
            acc = _epoch_acc(ranks, mine, same_world)
        except (KeyError, IndexError, TypeError, RuntimeError, ValueError) as err:
            first = str(err).splitlines()[0]
            raise TrainerError(
                f"checkpoint {path} does not fit this job's model or optimizers ({first})"
            ) from None
        pos = Position(pos.epoch, self._resume_step(payload, pos, path, same_world))
        self.global_step = global_step
        state = LoopState(
            global_step,
            acc["g_sum"].to(self.device),
            acc["d_sum"].to(self.device),
            acc["steps"],
            acc["elapsed"],
        )
        if same_world:
            rng.restore(mine["rng"], self.device)
            self._restore_buffers(mine.get("buffers", {}))
            self.stab.load_rank_state(mine)
        else:
            if self.rank0:
                log.warning(
                    "world size changed from %d to %d (global batch %d kept, gradient "
                    "accumulation %d): other random streams re-seeded, so the run matches an "
                    "unbroken one within float tolerance, not bitwise",
                    payload["world_size"],
                    self.world,
                    self.samples_per_step,
                    self.k,
                )
            rng.seed_all(self.config.training.seed + 7919 * self.dist.rank + 104729 * global_step)
            self.stab.reseed(global_step)
        return pos, state

    def _resume_step(
        self, payload: dict[str, Any], pos: Position, path: Path, same_world: bool
    ) -> int:
        """The step of the current global batch the epoch resumes at (worker/elastic.py);
        an older checkpoint's mid-epoch position keeps its epoch's old order."""
        where = str(path.parent)
        step = resume_step(
            where, pos.step, saved_position(payload), self.samples_per_step, not same_world
        )
        if step and not same_world and self.shards is not None:
            raise TrainerError(
                f"checkpoint {where}: a streamed data set cannot change size mid-epoch (each "
                "rank reads its own shards); resume at the size that wrote it"
            )
        if step and payload.get(DATA_ORDER_KEY) != DATA_ORDER:
            self.input.legacy_epoch = pos.epoch
        return step

    def _restore_buffers(self, saved: dict[str, Tensor]) -> None:
        """This rank's own BatchNorm statistics (see save); older checkpoints lack them."""
        with torch.no_grad():
            for net, m in (("generator", self.G), ("discriminator", self.D)):
                for k, v in m.named_buffers():
                    if f"{net}.{k}" in saved:
                        v.copy_(saved[f"{net}.{k}"].to(v.device))

    # ---- samples ---------------------------------------------------------------------------
    def real_examples(self, n: int) -> dict[str, np.ndarray]:
        n = min(n, len(self.dataset))
        return {k: v[:n] for k, v in self.dataset.arrays.items()}

    def generate(self, real: dict[str, np.ndarray], seed: int) -> Generated:
        """Rank 0: generate for `real` from a private RNG. The generator runs in train mode
        (batch statistics, as during training) with its buffers restored and the global
        RNG forked, so training is unaffected."""
        batch = {k: self._to_device(torch.from_numpy(v)) for k, v in real.items()}
        inputs = self.task.generator_inputs(batch, rng=torch.Generator().manual_seed(seed))
        g = self.stab.sampling_generator(self.G)
        saved = {k: v.clone() for k, v in g.named_buffers()}
        devices = [self.device] if self.device.type == "cuda" else []
        with (
            torch.random.fork_rng(devices=devices),
            torch.no_grad(),
            autocast(self.precision, self.device),
        ):
            fake = self.task.generate(g, inputs).float().cpu().numpy()
        with torch.no_grad():
            for k, v in g.named_buffers():
                v.copy_(saved[k])
        return Generated(fake, {k: v.cpu().numpy() for k, v in inputs.items()})

    def weights(self) -> dict[str, np.ndarray]:
        return {"generator": params_digest(self.G), "discriminator": params_digest(self.D)}

    # ---- the driver's protocol ----------------------------------------------------------------
    def epoch_losses(self, state: LoopState) -> tuple[float, float]:
        sums = torch.stack(
            [
                torch.as_tensor(state.g_sum, device=self.device),
                torch.as_tensor(state.d_sum, device=self.device),
            ]
        ).float()
        if self.world > 1:
            dist.all_reduce(sums)  # on the training group: these live on the device
        g, d = (sums / (max(state.steps, 1) * self.world)).tolist()
        return g, d

    def batches(self, epoch0: int, first_step: int) -> Iterator[Step]:
        return self.input.epoch(epoch0, first_step)

    def step(self, batch: Step, local_flags: Flags) -> StepResult:
        micro, index = batch
        stats = self.train_step(micro, micro_keys(index, len(micro), self.batch))
        self.global_step += 1
        stop, due = self._agree(*local_flags())
        return StepResult(stats.g_loss, stats.d_loss, stop, due, index.numpy())

    def fit(self) -> int:
        driver = Driver(self, self.config, self.env, self.stop, self.hooks)
        store = self.store if self.rank0 else None
        return run_to_end(
            driver, store, self.steps_per_epoch, lambda: self.stop.requested_at, self.export
        )

    def export(self, ref: CheckpointRef, out: Path) -> dict[str, Path]:
        """Rank 0: the generator of checkpoint `ref` as safetensors + JSON (export.py)."""
        from kubegan_trainer.backends.torch.export import export_generator

        return export_generator(self, ref, ref.path / STATE_FILE, out)


def _epoch_acc(ranks: list[dict[str, Any]], mine: dict[str, Any], same: bool) -> dict[str, Any]:
    """This rank's running sums of the epoch. At another world size every rank starts from
    the old ranks' mean, so the epoch's mean over the new ranks stays the mean it was."""
    if same:
        return mine["epoch_acc"]
    accs = [r["epoch_acc"] for r in ranks]
    mean = {k: sum(a[k] for a in accs) / len(accs) for k in ("g_sum", "d_sum")}
    return {**accs[0], **{k: torch.as_tensor(v) for k, v in mean.items()}}


def params_digest(module: nn.Module) -> np.ndarray:
    """Concatenated parameters as float64 numpy (tests compare ranks with it)."""
    return torch.cat([p.detach().double().flatten().cpu() for p in module.parameters()]).numpy()
