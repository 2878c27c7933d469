"""GPU check: one command that measures the PyTorch trainer on a GPU machine and always
leaves a table and a JSON file behind, whatever fails or runs out of time.

    python3 bench/gpu_check.py                 # on a GPU machine: system python3 + torch
    .venv/bin/python bench/gpu_check.py --tiny # here, on CPU (automatic without CUDA)

It needs torch and numpy; whatever else the trainer's step code imports and the machine
lacks (pydantic, prometheus-client) comes from bench/wheelhouse (`make gpu-wheelhouse`),
installed with pip into a temporary folder put on sys.path, never into the system. Pillow
and google-crc32c (image files, TFRecord checksums: never called by a training step on
synthetic data) are replaced by stubs that raise when called, if absent.

Rows, in order of importance (a global deadline, default 7.5 min, turns what is left into
"skipped (deadline)" rows; a watchdog writes the report and exits 15 s after it, whatever
the main thread is stuck in):

- ddp: one DDP step over NCCL at world size 1 (gloo on CPU); with >= 2 GPUs, 2 processes.
- throughput: dcgan 64² b128, acgan 32² b128, pix2pix 256² b8 (57M parameters), gan3d b64:
  kubegan samples/s in fp32 (TF32 on, as the trainer sets it), bf16 and fp16 (autocast,
  GradScaler), without and with channels_last; peak GPU memory; for fp32 and bf16 with
  the trainer's default layout also a plain hand-written loop of the same networks
  (plain/kubegan: 1.0 = no overhead, > 1 = kubegan slower).
- physics: gan3d quality scores (the trainer's quality.py) after the same short run in
  fp32 and bf16, and whether they agree within the validity tests' tolerances.
- compile: torch.compile of G and D, bf16 first, then fp32 (fp16 not compiled), each
  started only if the time it is expected to take fits before the deadline.

Each measurement is guarded: an exception becomes a one-line "failed: ..." row (the
traceback goes to gpu_check.log). Results go to $OUT if set, else bench/out/gpu_check/:
gpu_check.md (the table), gpu_check.json, gpu_check.log.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import zipfile
from pathlib import Path
from typing import Any

# The deadline counts from here, before torch is imported; across a re-exec (another python
# that has torch, see main) from the first start: the monotonic clock is the machine's.
T0 = float(os.environ.get("GPU_CHECK_T0") or time.monotonic())
REPO = Path(__file__).resolve().parents[1]
WHEELHOUSE = REPO / "bench" / "wheelhouse"
# Git-ignored; bench/results/ holds the dated write-ups made from these files.
RESULTS = REPO / "bench" / "out" / "gpu_check"
ENV_DEPS = "GPU_CHECK_DEPS"  # the temporary install folder, handed to the DDP workers

# The tolerances of tests/trainer/test_quality_validity.py (tests/trainer/test_gpu_check.py
# checks they are still the same): 35 % relative on the sampling-fraction error, 0.04
# absolute on the shape distances.
SF_RELATIVE = 0.35
SHAPE_ABSOLUTE = {"longitudinal_distance": 0.04, "transverse_distance": 0.04}

# model: (spec.model.options, batch per step, label). Synthetic data everywhere: the digits
# need scikit-learn, which a GPU machine need not have.
GPU_CASES: dict[str, tuple[dict[str, Any], int, str]] = {
    "dcgan": ({"imageSize": 64, "ngf": 64, "ndf": 64, "channels": 3}, 128, "64²"),
    "acgan": ({"imageSize": 32, "ngf": 64, "ndf": 64}, 128, "32²"),
    "pix2pix": ({"imageSize": 256, "numSamples": 32}, 8, "256²"),
    "gan3d": ({"numSamples": 256}, 64, "51x51x25"),
}
TINY_CASES: dict[str, tuple[dict[str, Any], int, str]] = {
    "dcgan": ({"imageSize": 16, "ngf": 8, "ndf": 8, "latentDim": 16, "numSamples": 64}, 8, "16²"),
    "acgan": ({"imageSize": 16, "ngf": 8, "ndf": 8, "latentDim": 16, "numSamples": 64}, 8, "16²"),
    "pix2pix": ({"imageSize": 32, "ngf": 8, "ndf": 8, "numSamples": 8}, 2, "32²"),
    "gan3d": ({"size": "tiny", "latentDim": 16, "numSamples": 8}, 2, "51x51x25 tiny"),
}
PRECISIONS = ("fp32", "bf16", "fp16")
TRAINER_PRECISION = {"fp32": "none", "bf16": "bf16", "fp16": "fp16"}
# The job of tests/trainer/test_quality_validity.py (its tolerances were set on it), and a
# smaller one for CPU runs, where only the code path matters.
PHYSICS_JOB: dict[str, Any] = {
    "options": {"size": "tiny", "numSamples": 96, "latentDim": 32},
    "batch": 8,
    "epochs": 2,
    "steps_per_epoch": 4,
    "optimizer": {"optimizer": "rmsprop", "learningRate": 0.003},
    "seed": 7,
}
PHYSICS_TINY = {**PHYSICS_JOB, "options": {"size": "tiny", "numSamples": 8, "latentDim": 16}}
PHYSICS_TINY.update(batch=4, steps_per_epoch=1)


# ---- the trainer's pieces: every import of the project in one place ----------------------------
# name: where it is, "module" or "module:attribute", the first that imports wins. The trainer's
# modules are being moved (config and contract into kubegan_api, torch_backend/ to
# backends/torch/, the worker's modules to worker/): the old places stay listed so this script
# runs on a checkout from before or after.
TRAINER_PARTS = {
    "TrainerConfig": ("kubegan_api.sections:", "kubegan_api:", "kubegan_trainer.config:"),
    "ENV_CHECKPOINT_DIR": ("kubegan_api.contract:", "kubegan_trainer.contract:"),
    "ENV_OUTPUT_DIR": ("kubegan_api.contract:", "kubegan_trainer.contract:"),
    "ENV_METRICS_PORT": ("kubegan_api.contract:", "kubegan_trainer.contract:"),
    "ClusterEnv": ("kubegan_trainer.worker.cluster_env:", "kubegan_trainer.cluster_env:"),
    "StopFlag": ("kubegan_trainer.worker.signals:", "kubegan_trainer.signals:"),
    "quality_for": ("kubegan_trainer.worker.quality:", "kubegan_trainer.quality:"),
    "build_dataset": ("kubegan_trainer.data:",),
    "rng": ("kubegan_trainer.backends.torch.rng", "kubegan_trainer.torch_backend.rng"),
    "DistInfo": ("kubegan_trainer.backends.torch.loop:", "kubegan_trainer.torch_backend.loop:"),
    "GanTrainer": ("kubegan_trainer.backends.torch.loop:", "kubegan_trainer.torch_backend.loop:"),
    "build_task": (
        "kubegan_trainer.backends.torch.models:",
        "kubegan_trainer.torch_backend.models:",
    ),
}


def _find(name: str, places: tuple[str, ...]) -> Any:
    errors = []
    for place in places:
        module_name, _, attr = place.partition(":")
        if importlib.util.find_spec(module_name.split(".")[0]) is None:
            errors.append(f"{module_name}: not on sys.path")
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and module_name.startswith(err.name):  # this place does not exist
                errors.append(f"{module_name}: absent")
                continue
            raise  # the module exists but one of its imports is missing: say which
        if not place.endswith(":"):
            return module
        if hasattr(module, attr or name):
            return getattr(module, attr or name)
        errors.append(f"{module_name}: no {name}")
    raise ImportError(f"{name} not found ({'; '.join(errors)})")


def _trainer_parts() -> types.SimpleNamespace:
    """The trainer's model and step code, nothing else (no launcher, no driver loop)."""
    return types.SimpleNamespace(**{name: _find(name, at) for name, at in TRAINER_PARTS.items()})


# ---- bootstrap: sys.path, missing dependencies, stubs ------------------------------------------
# (module to import, distribution to install, lowest major version the trainer works with)
NEEDED = (("pydantic", "pydantic", 2), ("prometheus_client", "prometheus-client", 0))
# Imported by modules the step code pulls in, never called by a step on synthetic data.
STUBBED = ("PIL", "google_crc32c")


def _have(module: str, dist: str, major: int) -> bool:
    if importlib.util.find_spec(module) is None:
        return False
    if not major:
        return True
    from importlib import metadata

    try:
        return int(metadata.version(dist).split(".")[0]) >= major
    except (metadata.PackageNotFoundError, ValueError):
        return True  # importable but unregistered (a vendored copy): let it try


def _wheel_fits(name: str) -> bool:
    """Whether a wheel's tags (name-version-python-abi-platform.whl) fit this interpreter;
    pure and Linux wheels only, which is what the wheelhouse holds."""
    py, abi, plat = name[: -len(".whl")].split("-")[-3:]
    major, minor = sys.version_info[:2]
    pythons = py.split(".")
    if plat == "any":
        return any(p in ("py3", f"py{major}{minor}", f"cp{major}{minor}") for p in pythons)
    if not sys.platform.startswith("linux") or not any(
        p.endswith(platform.machine()) for p in plat.split(".")
    ):
        return False
    if abi == "abi3":
        return any(p.startswith("cp3") and int(p[3:]) <= minor for p in pythons)
    return f"cp{major}{minor}" in pythons


def _unzip_wheels(wheelhouse: Path, target: Path) -> list[str]:
    """pip's job by hand, where the interpreter has no pip: every wheel in the wheelhouse
    that fits this interpreter, extracted. Enough for pure and manylinux wheels."""
    done = []
    for wheel in sorted(wheelhouse.glob("*.whl")):
        if _wheel_fits(wheel.name):
            with zipfile.ZipFile(wheel) as z:
                z.extractall(target)
            done.append(wheel.name)
    return done


def _install(missing: list[str], wheelhouse: Path, log: list[str]) -> Path:
    target = Path(tempfile.mkdtemp(prefix="gpu-check-deps-"))
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheelhouse)]
    cmd += ["--target", str(target), "--only-binary", ":all:", "--disable-pip-version-check"]
    cmd += ["--no-warn-script-location", "--quiet", *missing]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        log.append(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
        ok = proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired) as err:
        log.append(f"pip failed to run: {err}")
        ok = False
    if not ok:
        log.append(f"pip did not install; unzipped {_unzip_wheels(wheelhouse, target)}")
    return target


class _AbsentMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise ImportError(f"{cls.package} is not installed here (a gpu-check stub)")


def _stub(package: str) -> types.ModuleType:
    absent = _AbsentMeta("Absent", (Exception,), {"package": package})
    module = types.ModuleType(package, f"gpu-check stub: {package} is not installed")

    def __getattr__(name: str) -> Any:  # a module's attribute hook (PEP 562)
        if name.startswith("__"):
            raise AttributeError(name)
        return absent

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]
    module.__path__ = []  # a package, so `from PIL import Image` asks __getattr__
    return module


def _backport() -> list[str]:
    """What Python 3.10 lacks of what the project uses (it needs 3.11): enum.StrEnum."""
    import enum

    if hasattr(enum, "StrEnum"):
        return []

    class StrEnum(str, enum.Enum):  # noqa: UP042 - what 3.10 has to build it from
        def __str__(self) -> str:
            return str(self.value)

        @staticmethod
        def _generate_next_value_(name: str, *_: Any) -> str:
            return name.lower()

    enum.StrEnum = StrEnum  # type: ignore[attr-defined]
    return ["enum.StrEnum (python < 3.11)"]


def bootstrap(wheelhouse: Path, log: list[str]) -> dict[str, Any]:
    """Make the project and its step code's dependencies importable; say how."""
    for folder in ("api", "trainer"):
        path = str(REPO / folder)
        if path not in sys.path:
            sys.path.insert(0, path)
    found: dict[str, Any] = {"installed": [], "stubbed": [], "backported": _backport()}
    deps = os.environ.get(ENV_DEPS)
    if deps:  # a DDP worker: the parent installed them already
        sys.path.insert(0, deps)
    missing = [dist for module, dist, major in NEEDED if not _have(module, dist, major)]
    if missing and not deps:
        if wheelhouse.is_dir() and any(wheelhouse.glob("*.whl")):
            target = _install(missing, wheelhouse, log)
            sys.path.insert(0, str(target))
            importlib.invalidate_caches()
            os.environ[ENV_DEPS] = str(target)
            found["installed"] = missing
            found["deps_dir"] = str(target)
        else:
            log.append(f"missing {missing} and no wheels in {wheelhouse} (make gpu-wheelhouse)")
            found["missing"] = missing
    for package in STUBBED:
        if package not in sys.modules and importlib.util.find_spec(package) is None:
            sys.modules[package] = _stub(package)
            found["stubbed"].append(package)
    return found


# ---- the report: rows, the table, the files --------------------------------------------------
COLUMNS = (
    ("check", "check"),
    ("model", "model"),
    ("precision", "precision"),
    ("layout", "layout"),
    ("compile", "compile"),
    ("samples_s", "samples/s"),
    ("overhead", "plain/kubegan"),
    ("peak_mib", "peak MiB"),
    ("result", "result"),
)


class Report:
    """Every planned row from the start (pending until measured), written after each row
    so a kill at any point leaves the rows measured so far."""

    def __init__(self, out: Path, environment: dict[str, Any], settings: dict[str, Any]) -> None:
        self.out, self.environment, self.settings = out, environment, settings
        self.rows: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.log: list[str] = []
        self.lock = threading.RLock()
        self.closed = False

    def plan(self, **row: Any) -> dict[str, Any]:
        row.setdefault("result", "pending")
        self.rows.append(row)
        return row

    def finish(self, row: dict[str, Any], print_row: bool = True) -> None:
        with self.lock:
            if self.closed:
                return
            if print_row:
                print(self._line(row), flush=True)
            self.write()

    def header(self) -> str:
        e = self.environment
        return (
            f"gpu-check: {e['device']}; driver {e['driver']}; CUDA {e['cuda']}; "
            f"torch {e['torch']}; python {e['python']}; numpy {e['numpy']}; "
            f"deps {e['deps']}"
        )

    def _cell(self, row: dict[str, Any], key: str) -> str:
        value = row.get(key)
        if value is None or value == "":
            return "-"
        if isinstance(value, float):
            return f"{value:.3f}x" if key == "overhead" else f"{value:.1f}"
        return str(value).replace("|", "/").replace("\n", " ")

    def _line(self, row: dict[str, Any]) -> str:
        return "| " + " | ".join(self._cell(row, k) for k, _ in COLUMNS) + " |"

    def table(self) -> str:
        head = "| " + " | ".join(title for _, title in COLUMNS) + " |"
        rule = "|" + "|".join("---:" if k in ("samples_s", "overhead", "peak_mib") else "---"
                              for k, _ in COLUMNS) + "|"  # fmt: skip
        lines = [self.header(), "", head, rule, *(self._line(r) for r in self.rows)]
        if self.notes:
            lines += ["", *(f"- {n}" for n in self.notes)]
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        with self.lock:
            self.out.mkdir(parents=True, exist_ok=True)
            doc = {
                "environment": self.environment,
                "settings": self.settings,
                "elapsed_s": round(time.monotonic() - T0, 1),
                "rows": self.rows,
                "notes": self.notes,
            }
            _atomic(self.out / "gpu_check.json", json.dumps(doc, indent=1, default=str) + "\n")
            _atomic(self.out / "gpu_check.md", self.table())
            _atomic(self.out / "gpu_check.log", "\n".join(self.log) + "\n")

    def close(self, why: str) -> None:
        """Rows never reached become skipped; the files are written one last time."""
        with self.lock:
            if self.closed:
                return
            for row in self.rows:
                if row["result"] == "pending":
                    row["result"] = why
                elif row["result"] == "running":
                    row["result"] = "stopped: still running at the hard deadline"
            self.write()
            self.closed = True


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _failure(err: BaseException) -> str:
    first = (str(err).strip().splitlines() or [""])[0]
    return f"failed: {type(err).__name__}: {first}"[:160]


# ---- the deadline -------------------------------------------------------------------------------
class Deadline:
    def __init__(self, seconds: float) -> None:
        self.at = T0 + seconds

    def left(self) -> float:
        return self.at - time.monotonic()


class Watchdog:
    """At the deadline plus a grace period, whatever the main thread is doing (a compile,
    a hung collective): kill the workers, write the report, exit."""

    def __init__(self, report: Report, deadline: Deadline, grace: float) -> None:
        self.report, self.children = report, []
        self.timer = threading.Timer(max(deadline.left() + grace, 1.0), self._fire)
        self.timer.daemon = True
        self.timer.start()

    def _fire(self) -> None:
        try:
            for child in self.children:
                with contextlib.suppress(OSError):
                    child.kill()
            self.report.notes.append("hard stop: the watchdog ended the run past the deadline")
            for _ in range(3):  # the main thread may be adding a key to the row being dumped
                try:
                    self.report.close("skipped (deadline)")
                    break
                except RuntimeError:
                    time.sleep(0.1)
            print(self.report.table(), flush=True)
        finally:
            os._exit(0)


# ---- measuring ----------------------------------------------------------------------------------
class Bench:
    """What every measurement shares: torch, the trainer's parts, the device, the sizes."""

    def __init__(self, torch: Any, parts: types.SimpleNamespace, args: argparse.Namespace) -> None:
        self.torch, self.parts, self.args = torch, parts, args
        self.cuda = torch.cuda.is_available() and not args.cpu
        # A DDP worker has set its own GPU as the current one before this.
        cuda = torch.device("cuda", torch.cuda.current_device()) if self.cuda else None
        self.device = cuda or torch.device("cpu")
        self.tiny = args.tiny
        self.cases = TINY_CASES if self.tiny else GPU_CASES
        self.tmp = tempfile.TemporaryDirectory(prefix="gpu-check-")
        self.physics_job = PHYSICS_TINY if self.tiny else PHYSICS_JOB
        self.seconds = 0.0 if self.tiny else 1.0  # per timing; 0: one step, no calibration
        self._datasets: dict[str, Any] = {}

    def config(
        self, model: str, options: dict[str, Any], batch: int, precision: str, **training: Any
    ) -> Any:
        t = {
            "epochs": 1,
            "batchSizePerReplica": batch,
            "mixedPrecision": TRAINER_PRECISION[precision],
            "seed": 0,
            "generator": {"optimizer": "adam", "learningRate": 2e-4},
            "discriminator": {"optimizer": "adam", "learningRate": 2e-4},
        }
        t.update(training)
        return self.parts.TrainerConfig.model_validate(
            {
                "jobName": "gpu-check",
                "framework": "pytorch",
                "model": {"name": model, "options": options},
                "data": {"source": "synthetic"},
                "training": t,
            }
        )

    def trainer(self, cfg: Any, rank: int = 0, world: int = 1, ctrl: Any = None) -> Any:
        """A GanTrainer as the worker builds one (same seeds), with a throwaway run folder."""
        p = self.parts
        # Synthetic data takes seconds to make at GPU sizes, and is the same for every
        # precision and layout.
        options = {k: v for k, v in cfg.model.options.items() if k != "channelsLast"}
        key = json.dumps([cfg.model.name, options, cfg.training.seed], sort_keys=True, default=str)
        if key not in self._datasets:
            self._datasets[key] = p.build_dataset(cfg)
        dataset = self._datasets[key]
        p.rng.seed_all(cfg.training.seed)
        task = p.build_task(cfg, dataset)
        p.rng.seed_all(cfg.training.seed + 1_000_003 * (rank + 1))
        run = tempfile.mkdtemp(dir=self.tmp.name)
        env = p.ClusterEnv.from_environ(
            {
                p.ENV_CHECKPOINT_DIR: f"{run}/checkpoints",
                p.ENV_OUTPUT_DIR: run,
                p.ENV_METRICS_PORT: "19999",
            }
        )
        info = p.DistInfo(rank, world, rank, self.device, ctrl)
        return p.GanTrainer(cfg, env, info, task, dataset, p.StopFlag())

    def batches(self, trainer: Any, n: int = 4) -> list[Any]:
        b, size = trainer.batch, len(trainer.dataset)
        arange = self.torch.arange
        return [trainer._batch(arange(i * b, (i + 1) * b) % size) for i in range(n)]

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def rate(self, step: Any, batch: int, seconds: float) -> float:
        """Samples/s over about `seconds` of steps (at least 2), after a calibration pair;
        `seconds` 0: one step (CPU runs, where only the code path matters)."""
        self.sync()
        t0 = time.perf_counter()
        if not seconds:
            step(0)
            self.sync()
            return batch / (time.perf_counter() - t0)
        for i in range(2):
            step(i)
        self.sync()
        per_step = max((time.perf_counter() - t0) / 2, 1e-6)
        n = int(min(max(seconds / per_step, 2), 200))
        t0 = time.perf_counter()
        for i in range(n):
            step(i)
        self.sync()
        return n * batch / (time.perf_counter() - t0)

    def reset_peak(self) -> None:
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def peak_mib(self) -> float | None:
        if not self.cuda:
            return None
        return self.torch.cuda.max_memory_allocated(self.device) / 2**20


def plain_loop(torch: Any, trainer: Any, precision: str) -> Any:
    """The textbook loop over the trainer's own networks (placed and formatted by it) and the
    task's schedule: no accumulation, no DDP, no gradient norms, no loss bookkeeping."""
    task, g, d, device = trainer.task, trainer.G, trainer.D, trainer.device
    opt_g = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    sched = task.schedule

    def ac() -> contextlib.AbstractContextManager:
        return torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()

    def update(opt: Any, loss: Any) -> None:
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()  # per update: gan3d steps D (and G) twice per iteration

    def step(batch: dict[str, Any]) -> None:
        inputs = task.generator_inputs(batch)
        if sched.d_fakes_training:
            with ac():
                fake = task.generate(g, inputs)
        else:
            g.eval()
            with torch.no_grad(), ac():
                fake = task.generate(g, inputs)
            g.train()
        reuse = fake if sched.d_fakes_training else None
        for phase in sched.phases:
            score = getattr(task, phase.loss)
            for _ in range(phase.repeats):
                if phase.network == "discriminator":
                    with ac():
                        loss = score(d, batch, fake.detach(), inputs)
                    update(opt_d, loss)
                    continue
                if phase.fresh_inputs:
                    inputs, reuse = task.generator_inputs(batch), None
                d.requires_grad_(False)
                with ac():
                    made = reuse if reuse is not None else task.generate(g, inputs)
                    loss = score(d, batch, made, inputs)
                reuse = None
                update(opt_g, loss)
                d.requires_grad_(True)

    return step


def measure_throughput(bench: Bench, row: dict[str, Any], with_plain: bool) -> None:
    torch = bench.torch
    model, precision = row["key_model"], row["precision"]
    options, batch, _ = bench.cases[model]
    opts = {**options, "channelsLast": row["layout"] == "channels_last"}
    seconds = bench.seconds
    bench.reset_peak()
    trainer = bench.trainer(bench.config(model, opts, batch, precision))
    row["params_m"] = round(
        sum(p.numel() for m in (trainer.G, trainer.D) for p in m.parameters()) / 1e6, 2
    )
    batches = bench.batches(trainer)

    def ours(i: int) -> None:
        trainer.train_step([batches[i % len(batches)]])

    # cuDNN's autotuning runs in the first steps; a tiny run times nothing, it walks the path.
    warm = 0 if bench.tiny else 3
    for i in range(warm):
        ours(i)
    best = bench.rate(ours, batch, seconds)
    row["peak_mib"] = bench.peak_mib()
    if with_plain:
        plain = plain_loop(torch, trainer, precision)

        def theirs(i: int) -> None:
            plain(batches[i % len(batches)])

        for i in range(warm):
            theirs(i)
        plain_best = bench.rate(theirs, batch, seconds)
        if not bench.tiny:  # interleaved, best of two each: warm-up and a shared machine's noise
            best = max(best, bench.rate(ours, batch, seconds))
            plain_best = max(plain_best, bench.rate(theirs, batch, seconds))
        row["plain_samples_s"] = plain_best
        row["overhead"] = plain_best / best
    row["samples_s"] = best
    row["result"] = "ok" + (f" (plain {row['plain_samples_s']:.1f}/s)" if with_plain else "")


def measure_compiled(bench: Bench, row: dict[str, Any]) -> float:
    """torch.compile of G and D inside the trainer; returns the wall time of the first
    steps (compilation and recompilations included)."""
    torch = bench.torch
    model, precision = row["key_model"], row["precision"]
    options, batch, _ = bench.cases[model]
    # As the trainer does under training.compile: contiguous parameters, inductor's layout.
    opts = {**options, "channelsLast": False}
    torch._dynamo.reset()
    bench.reset_peak()
    trainer = bench.trainer(bench.config(model, opts, batch, precision))
    backend = bench.args.compile_backend
    # At world size 1 the trainer's G_ddp/D_ddp are the bare modules: swap all four.
    trainer.G = trainer.G_ddp = torch.compile(trainer.G, backend=backend)
    trainer.D = trainer.D_ddp = torch.compile(trainer.D, backend=backend)
    batches = bench.batches(trainer)

    def ours(i: int) -> None:
        trainer.train_step([batches[i % len(batches)]])

    t0 = time.perf_counter()
    for i in range(3):  # D with and without gradients, G in train and eval mode: all compiled
        ours(i)
    bench.sync()
    compile_s = time.perf_counter() - t0
    row["samples_s"] = bench.rate(ours, batch, bench.seconds)
    row["peak_mib"] = bench.peak_mib()
    row["compile_s"] = round(compile_s, 1)
    row["result"] = f"ok (backend {backend}; first 3 steps {compile_s:.1f} s)"
    torch._dynamo.reset()
    return compile_s


def measure_physics(bench: Bench, precision: str) -> dict[str, list[dict[str, float]]]:
    """The validity test's gan3d job, one worker: quality after each of its epochs."""
    job = bench.physics_job
    cfg = bench.config(
        "gan3d",
        job["options"],
        job["batch"],
        precision,
        epochs=job["epochs"],
        stepsPerEpoch=job["steps_per_epoch"],
        seed=job["seed"],
        generator=job["optimizer"],
        discriminator=job["optimizer"],
    )
    trainer = bench.trainer(cfg)
    quality = bench.parts.quality_for("showers", trainer, cfg.training.seed)
    scores = []
    for epoch in range(job["epochs"]):
        for micro, _ in trainer.batches(epoch, 0):
            trainer.train_step(micro)
        scores.append(quality.measure(trainer)[0])
    return {"epochs": scores}


def physics_gap(a: dict[str, float], b: dict[str, float]) -> list[str]:
    """What is beyond the validity tests' tolerances between two epochs' scores."""
    problems = []
    sf = "sampling_fraction_error"
    gap = abs(a[sf] - b[sf]) / max(abs(a[sf]), abs(b[sf]), 1e-12)
    if not gap <= SF_RELATIVE:
        problems.append(f"{sf} {gap:.0%} apart > {SF_RELATIVE:.0%}")
    for metric, tol in SHAPE_ABSOLUTE.items():
        if not abs(a[metric] - b[metric]) <= tol:
            problems.append(f"{metric} {abs(a[metric] - b[metric]):.3f} apart > {tol}")
    return problems


# ---- DDP: workers in their own processes, so a hung NCCL cannot stall the run -------------------
def ddp_worker(spec: dict[str, Any]) -> None:
    """One rank: DDP over NCCL (gloo on CPU), a few train steps, one all_reduce."""
    from datetime import timedelta

    log: list[str] = []
    bootstrap(Path(spec["wheelhouse"]), log)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    args = argparse.Namespace(tiny=spec["tiny"], cpu=spec["cpu"], compile_backend="inductor")
    rank, world = spec["rank"], spec["world"]
    if torch.cuda.is_available() and not args.cpu:
        torch.cuda.set_device(rank)
        _cuda_settings(torch)
    bench = Bench(torch, _trainer_parts(), args)
    backend = "nccl" if bench.cuda else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{spec['port']}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=90),
    )
    try:
        ctrl = dist.new_group(backend="gloo") if backend == "nccl" and world > 1 else None
        options, batch, _ = bench.cases[spec["model"]]
        trainer = bench.trainer(
            bench.config(spec["model"], options, batch, "bf16"), rank, world, ctrl
        )
        if world == 1:  # the trainer wraps only with peers; wrap as it does, for the smoke
            ids = [rank] if bench.cuda else None
            trainer.G_ddp = DDP(trainer.G, device_ids=ids, broadcast_buffers=False)
            trainer.D_ddp = DDP(trainer.D, device_ids=ids, broadcast_buffers=False)
        batches = bench.batches(trainer)

        def step(i: int) -> None:
            trainer.train_step([batches[i % len(batches)]])

        step(0)
        rate = bench.rate(step, batch, bench.seconds and 2.0)
        ones = torch.ones(1, device=trainer.device)
        dist.all_reduce(ones)
        result = {
            "samples_s": rate,
            "all_reduce": float(ones.item()),
            "backend": backend,
            "peak_mib": bench.peak_mib(),
        }
    finally:
        dist.destroy_process_group()
    _atomic(Path(spec["result"]), json.dumps(result))


def _free_port() -> int:
    """A rendezvous port from the project's port helper (outside the ephemeral range, leased),
    as every test and benchmark takes its ports."""
    from kubegan_trainer.launch.ports import reserve_port

    return reserve_port()


def run_ddp(
    bench: Bench, world: int, watchdog: Watchdog, report: Report, timeout: float
) -> list[dict[str, Any]]:
    """`world` worker processes of this script; their results, or an exception."""
    port, procs, results = _free_port(), [], []
    for rank in range(world):
        result = Path(bench.tmp.name) / f"ddp-{world}-{rank}.json"
        spec = {
            "rank": rank,
            "world": world,
            "port": port,
            "model": "dcgan",
            "tiny": bench.tiny,
            "cpu": not bench.cuda,
            "wheelhouse": str(bench.args.wheelhouse),
            "result": str(result),
        }
        out = open(Path(bench.tmp.name) / f"ddp-{world}-{rank}.log", "w+")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, __file__, "--ddp-worker", json.dumps(spec)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
        watchdog.children.append(proc)
        procs.append((proc, out, result))
    end = time.monotonic() + timeout
    try:
        for proc, _, _ in procs:
            proc.wait(timeout=max(end - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        for proc, _, _ in procs:
            proc.kill()
    problems = []
    for rank, (proc, out, result) in enumerate(procs):
        proc.wait()
        out.seek(0)
        text = out.read()
        out.close()
        report.log.append(f"--- ddp world {world} rank {rank} (exit {proc.returncode})\n{text}")
        if result.is_file():
            results.append(json.loads(result.read_text()))
        else:
            last = (text.strip().splitlines() or ["no output"])[-1]
            problems.append(f"rank {rank} exit {proc.returncode}: {last}")
    if problems:
        raise RuntimeError("; ".join(problems)[:150])
    return results


# ---- the run ------------------------------------------------------------------------------------
def _cuda_settings(torch: Any) -> None:
    """What the trainer's worker sets on a GPU (torch_backend.worker): measure the same."""
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def environment(torch: Any, found: dict[str, Any], cuda: bool) -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": getattr(torch, "__version__", "missing"),
        "device": f"{platform.machine()} CPU, {os.cpu_count()} cores",
        "driver": "-",
        "cuda": "-",
        "gpus": 0,
    }
    try:
        import numpy

        env["numpy"] = numpy.__version__
    except ImportError:
        env["numpy"] = "missing"
    deps = [f"{d} from the wheelhouse" for d in found.get("installed", [])]
    deps += [f"{d} MISSING" for d in found.get("missing", [])]
    deps += [f"{p} stubbed" for p in found.get("stubbed", [])]
    deps += [f"{b} backported" for b in found.get("backported", [])]
    env["deps"] = ", ".join(deps) or "all present"
    if torch is None or not cuda:
        if torch is not None and shutil.which("nvidia-smi"):
            env["cuda"] = (
                f"NOT AVAILABLE to torch (built for CUDA {torch.version.cuda}; "
                f"torch.cuda.is_available() {torch.cuda.is_available()}; nvidia-smi present)"
            )
        return env
    n = torch.cuda.device_count()
    env["gpus"] = n
    env["device"] = f"{torch.cuda.get_device_name(0)} x{n}"
    major, minor = torch.cuda.get_device_capability(0)
    env["capability"] = f"{major}.{minor}"
    env["cuda"] = f"{torch.version.cuda} (torch build)"
    with contextlib.suppress(Exception):
        v = torch._C._cuda_getDriverVersion()
        env["cuda"] += f", driver API {v // 1000}.{v % 1000 // 10}"
    with contextlib.suppress(Exception):
        env["cudnn"] = torch.backends.cudnn.version()
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
        )
        env["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else "?"
    except (OSError, subprocess.TimeoutExpired, IndexError):
        env["driver"] = "? (no nvidia-smi)"
    return env


def _python_with_torch() -> str | None:
    """Another interpreter on PATH (or a usual place) that imports torch, if this one cannot:
    the one GPU run must not be lost to `python3` being the wrong python."""
    if os.environ.get("GPU_CHECK_REEXEC"):
        return None
    # Paths as they are, not resolved: a venv's python links to the system's binary.
    seen = {os.path.abspath(sys.executable)}
    for name in ("python3", "python", "/usr/bin/python3", "/usr/local/bin/python3",
                 "/opt/conda/bin/python"):  # fmt: skip
        path = shutil.which(name)
        if not path or os.path.abspath(path) in seen:
            continue
        seen.add(os.path.abspath(path))
        try:
            ok = subprocess.run([path, "-c", "import torch"], capture_output=True, timeout=90)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ok.returncode == 0:
            return path
    return None


def guarded(report: Report, row: dict[str, Any], fn: Any, *args: Any) -> Any:
    """Run one measurement; an exception becomes the row's one-line result."""
    row["result"] = "running"
    t0 = time.perf_counter()
    try:
        value = fn(*args)
    except Exception as err:  # every failure is a row, never the end of the run
        row["result"] = _failure(err)
        report.log.append(f"--- {row['check']} {row.get('model')} {row.get('precision')}")
        report.log.append(traceback.format_exc())
        value = None
    row["seconds"] = round(time.perf_counter() - t0, 1)  # what the row cost: the budget's unit
    report.finish(row)
    return value


def plan_rows(report: Report, bench: Bench, models: list[str]) -> dict[str, list]:
    default_layout = "channels_last" if bench.cuda else "contiguous"  # channelsLast: auto
    layouts = ("contiguous", "channels_last")
    rows: dict[str, list] = {"ddp": [], "throughput": [], "physics": [], "compile": []}
    rows["ddp"].append(report.plan(check="ddp", model="dcgan", precision="bf16", world=1))
    rows["ddp"].append(report.plan(check="ddp", model="dcgan", precision="bf16", world=2))

    def throughput_row(model: str, precision: str, layout: str, **extra: Any) -> dict[str, Any]:
        _, batch, size = bench.cases[model]
        return report.plan(
            check="throughput",
            key_model=model,
            model=f"{model} {size} b{batch}",
            precision=precision,
            layout=layout,
            **extra,
        )

    for model in models:
        for precision in PRECISIONS:
            for layout in layouts:
                plain = precision != "fp16" and layout == default_layout
                rows["throughput"].append(
                    throughput_row(model, precision, layout, compile="no", with_plain=plain)
                )
    job = bench.physics_job
    label = f"gan3d tiny b{job['batch']} {job['epochs']}x{job['steps_per_epoch']} steps"
    for precision in ("fp32", "bf16", "agree"):
        rows["physics"].append(report.plan(check="physics", model=label, precision=precision))
    compile_precisions = ("fp32",) if bench.tiny else ("bf16", "fp32")
    compile_models = models[:1] if bench.tiny else models
    for precision in compile_precisions:
        for model in compile_models:
            rows["compile"].append(throughput_row(model, precision, "inductor", compile="yes"))
    return rows


def run_all(bench: Bench, report: Report, watchdog: Watchdog, deadline: Deadline) -> None:
    rows = plan_rows(report, bench, bench.args.models)
    skip = "skipped (deadline)"
    if bench.args.only_compile:  # a second, short GPU call after a full one
        for row in rows["ddp"] + rows["throughput"] + rows["physics"]:
            row.pop("with_plain", None)
            row["result"] = "skipped (--only-compile)"
            report.finish(row)
        run_compile_rows(bench, report, rows["compile"], deadline)
        return

    # DDP first: cheap, and the one check a GPU machine is needed for whatever the numbers.
    single = rows["ddp"][0]
    single["layout"] = "DDP world 1"

    def ddp_single() -> None:
        (r,) = run_ddp(bench, 1, watchdog, report, min(120.0, max(deadline.left(), 5)))
        single.update(samples_s=r["samples_s"], peak_mib=r["peak_mib"])
        single["result"] = f"ok: a DDP step + all_reduce over {r['backend']}, world 1"

    if deadline.left() > 30:
        guarded(report, single, ddp_single)
    else:
        single["result"] = skip
    pair = rows["ddp"][1]
    pair["layout"] = "DDP world 2"
    gpus = bench.torch.cuda.device_count() if bench.cuda else 0
    if bench.cuda and gpus < 2:
        pair["result"] = f"skipped ({gpus} GPU)"
        report.finish(pair)
    elif deadline.left() < 60 or bench.args.no_scaling:
        pair["result"] = skip if deadline.left() < 60 else "skipped (--no-scaling)"
        report.finish(pair)
    else:

        def ddp_pair() -> None:
            rs = run_ddp(bench, 2, watchdog, report, min(180.0, max(deadline.left(), 5)))
            total = sum(r["samples_s"] for r in rs)
            pair.update(samples_s=total, peak_mib=max((r["peak_mib"] or 0) for r in rs) or None)
            one = single.get("samples_s")
            speedup = f"{total / one:.2f}x of 1 process" if one else "no 1-process number"
            pair["result"] = f"ok: 2 processes over {rs[0]['backend']}, {speedup}"

        guarded(report, pair, ddp_pair)

    for row in rows["throughput"]:
        with_plain = row.pop("with_plain")
        if deadline.left() < (5 if bench.tiny else 20):
            row["result"] = skip
            report.finish(row)
            continue
        guarded(report, row, measure_throughput, bench, row, with_plain)

    physics: dict[str, Any] = {}
    for row in rows["physics"][:2]:
        if deadline.left() < (5 if bench.tiny else 30):
            row["result"] = skip
            report.finish(row)
            continue

        def one(row: dict[str, Any] = row) -> None:
            t0 = time.perf_counter()
            physics[row["precision"]] = measure_physics(bench, row["precision"])
            last = physics[row["precision"]]["epochs"][-1]
            row["scores"] = physics[row["precision"]]["epochs"]
            row["result"] = "ok: " + ", ".join(f"{k}={v:.4g}" for k, v in last.items())
            row["result"] += f" ({time.perf_counter() - t0:.0f} s)"

        guarded(report, row, one)
    agree = rows["physics"][2]
    if {"fp32", "bf16"} <= set(physics):
        pairs = zip(physics["fp32"]["epochs"], physics["bf16"]["epochs"], strict=True)
        gaps = [p for epoch, (a, b) in enumerate(pairs, 1) for p in physics_gap(a, b)]
        agree["result"] = (
            "ok: bf16 within the validity tolerances of fp32 at every epoch"
            if not gaps
            else "DISAGREE: " + "; ".join(gaps)[:150]
        )
    else:
        agree["result"] = "skipped (a physics run is missing)"
    report.finish(agree)

    run_compile_rows(bench, report, rows["compile"], deadline)


def run_compile_rows(
    bench: Bench, report: Report, compile_rows: list[dict[str, Any]], deadline: Deadline
) -> None:
    if bench.args.no_compile:
        for row in compile_rows:
            row["result"] = "skipped (--no-compile)"
            report.finish(row)
        return
    # A first guess (an H100 took 18-21 s for pix2pix), then the last compile's time.
    expected = 20.0 if bench.tiny else 45.0
    for row in compile_rows:
        if deadline.left() < expected * 1.3 + 10:
            row["result"] = f"skipped (deadline: a compile takes ~{expected:.0f} s)"
            report.finish(row)
            continue
        took = guarded(report, row, measure_compiled, bench, row)
        if took:
            expected = max(took, 5.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="CPU sizes (the default without CUDA)")
    ap.add_argument("--cpu", action="store_true", help="ignore CUDA (with --tiny: the test's run)")
    ap.add_argument("--deadline", type=float, default=450.0, help="seconds (default 7.5 min)")
    ap.add_argument(
        "--out", type=Path, default=None, help="default: $OUT, else bench/out/gpu_check"
    )
    ap.add_argument("--models", default="dcgan,acgan,pix2pix,gan3d")
    ap.add_argument("--wheelhouse", type=Path, default=WHEELHOUSE)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--only-compile", action="store_true", help="the torch.compile rows alone")
    ap.add_argument("--no-scaling", action="store_true", help="no 2-process DDP run")
    ap.add_argument("--compile-backend", default=None, help="default: inductor; eager on CPU")
    ap.add_argument("--ddp-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ddp_worker:
        ddp_worker(json.loads(args.ddp_worker))
        return 0
    args.models = [m for m in args.models.split(",") if m]
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else RESULTS)

    log: list[str] = []
    found = bootstrap(args.wheelhouse, log)
    torch = None
    problem = None
    try:
        import torch  # after the bootstrap: it may provide typing_extensions
    except Exception as err:  # report even that, unless another python has it
        problem = _failure(err)
        other = None if args.cpu else _python_with_torch()
        if other:
            # stderr: stdout's first line stays the one that says what was found
            message = f"gpu-check: {sys.executable} has no torch, {other} has: running there"
            print(message, file=sys.stderr, flush=True)
            os.environ.update(GPU_CHECK_T0=str(T0), GPU_CHECK_REEXEC="1")
            os.environ.pop(ENV_DEPS, None)
            os.execv(other, [other, str(Path(__file__).resolve()), *(argv or sys.argv[1:])])
    cuda = bool(torch and torch.cuda.is_available() and not args.cpu)
    args.tiny = args.tiny or not cuda
    args.compile_backend = args.compile_backend or ("inductor" if cuda else "eager")
    env = environment(torch, found, cuda)
    settings = {
        "tiny": args.tiny,
        "deadline_s": args.deadline,
        "models": args.models,
        "compile_backend": args.compile_backend,
    }
    report = Report(out, env, settings)
    report.log += log
    print(report.header(), flush=True)
    deadline = Deadline(args.deadline)
    watchdog = Watchdog(report, deadline, grace=15.0)
    report.notes += [
        "fp32 = TF32 matmuls and convolutions, as the trainer sets on CUDA; bf16/fp16 = "
        "autocast, fp16 with a GradScaler.",
        "plain/kubegan: a hand-written loop of the same networks and schedule, samples/s "
        "ratio (> 1: kubegan slower); measured for fp32 and bf16 in the trainer's default "
        "layout (channels_last on CUDA).",
        "compile: bf16 first, then fp32, each only if the last compile's time fits before "
        "the deadline; fp16 is not compiled (budget).",
        "physics: gan3d trained in fp32 and in bf16 from the same seed, scored by the "
        "trainer's quality.py; on a GPU the validity tests' job (tiny gan3d, batch 8, 2 epochs "
        "x 4 steps), on CPU a smaller one (only the code path counts); tolerances "
        f"{SF_RELATIVE:.0%} relative on sampling_fraction_error, "
        f"{SHAPE_ABSOLUTE['longitudinal_distance']} absolute on the shape distances.",
    ]
    if torch is None:
        report.plan(check="torch", result=problem)
        report.close("skipped (no torch)")
        print(report.table(), flush=True)
        return 1
    try:
        parts = _trainer_parts()
    except Exception as err:
        report.log.append(traceback.format_exc())
        report.plan(check="import", model="kubegan_trainer", result=_failure(err))
        report.close("skipped (the trainer does not import)")
        print(report.table(), flush=True)
        return 1
    if cuda:
        _cuda_settings(torch)
    bench = Bench(torch, parts, args)
    try:
        run_all(bench, report, watchdog, deadline)
    except Exception as err:  # a bug of this script: the rows so far still count
        report.log.append(traceback.format_exc())
        report.notes.append(f"the run stopped early: {_failure(err)}")
    finally:
        watchdog.timer.cancel()
        report.notes.append(f"finished in {time.monotonic() - T0:.0f} s")
        report.close("skipped (deadline)")
        bench.tmp.cleanup()
    print("\n" + report.table(), flush=True)
    print(f"gpu-check: wrote {out}/gpu_check.md, gpu_check.json, gpu_check.log", flush=True)
    return 1 if any(r["result"].startswith("failed") for r in report.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
