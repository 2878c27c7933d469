"""`kubegan run`: a GANTrainingJob's workers as local processes, no cluster.

Each worker gets the environment the operator would give its pod (`build_worker_env`,
DESIGN §4) with 127.0.0.1 and distinct free ports, and runs `python -m kubegan_trainer`.
Worker output goes to `<output>/logs/worker-<i>.log`; the terminal shows a progress bar
(rank 0's progress.json), rank 0's messages, and a summary table at the end. Ctrl-C or
SIGTERM is forwarded once as SIGTERM: workers write a checkpoint at the next step
boundary and exit; a second Ctrl-C kills them. Running again on the same output
directory resumes from the latest checkpoint.

Framework-free: the CLI in kubegan_operator imports this without torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TextIO

from kubegan_api.contract import (
    CHECKPOINT_SUBDIR,
    CONFIG_FILE,
    ENV_ACCUMULATION_STEPS,
    ENV_CPU_THREADS,
    ENV_LOG_FILE,
    ENV_METRICS_ADDR,
    ENV_METRICS_PORT,
    EXIT_STOPPED,
    LOCAL_ADDR,
)
from kubegan_api.sections import TrainerConfig
from kubegan_api.urls import redact_urls
from kubegan_api.worker_env import WorkerTopology, build_worker_env

from kubegan_trainer.launch.ports import reserve_port, reserve_ports
from kubegan_trainer.launch.resume_config import record_config
from kubegan_trainer.launch.rundir import claim_run_dir
from kubegan_trainer.launch.summary import progress_bar_for, summary_table
from kubegan_trainer.worker.cluster_env import visible_gpus
from kubegan_trainer.worker.lifeline import parent_death_hook
from kubegan_trainer.worker.progress_file import read_progress
from kubegan_trainer.worker.worker_metrics import METRICS_FILE, MetricsLog

KILL_GRACE_SECONDS = 30.0


def worker_environments(
    config: TrainerConfig,
    *,
    workers: int,
    gpus_per_worker: int,
    output_dir: Path,
    cost_rate_per_hour: float,
    namespace: str,
    config_path: Path,
    accumulation_steps: int | None = None,
) -> list[dict[str, str]]:
    """The §4 environment of every local worker (plus thread and GPU pinning);
    `accumulation_steps`: an elastic job's at this size (launch/local_size.py)."""
    hosts = [f"{LOCAL_ADDR}:{port}" for port in reserve_ports(workers)]
    metrics_port = reserve_port(config.monitoring.metrics_port)
    procs = workers * max(1, gpus_per_worker)
    threads = max(1, (os.cpu_count() or 1) // procs)  # don't oversubscribe the cores
    envs = []
    for i in range(workers):
        topo = WorkerTopology(
            job_name=config.job_name,
            namespace=namespace,
            framework=config.framework.value,
            tpu=False,
            hosts=hosts,
            index=i,
            gpus_per_worker=gpus_per_worker,
            config_path=str(config_path),
            checkpoint_dir=str(output_dir / CHECKPOINT_SUBDIR),
            output_dir=str(output_dir),
            metrics_port=metrics_port,
            cost_rate_per_hour=cost_rate_per_hour,
            accumulation_steps=accumulation_steps,
        )
        env = dict(os.environ)
        env.pop(ENV_ACCUMULATION_STEPS, None)  # only ever this job's, never the shell's
        env.update(build_worker_env(topo))
        env.setdefault(ENV_CPU_THREADS, str(threads))
        env["PYTHONUNBUFFERED"] = "1"
        env[ENV_METRICS_ADDR] = LOCAL_ADDR  # what the banner promises: not the LAN
        env["TORCH_CPP_LOG_LEVEL"] = env.get("TORCH_CPP_LOG_LEVEL", "ERROR")
        # Slices of the devices this process may use: a user's CUDA_VISIBLE_DEVICES is kept.
        visible = visible_gpus(os.environ)
        mine = visible[i * gpus_per_worker : (i + 1) * gpus_per_worker]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(mine)  # "" = CPU-only worker
        envs.append(env)
    return envs


class _Console:
    """Progress bar on a terminal (one redrawn line), plain lines otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.bar = ""

    def line(self, text: str) -> None:
        if self.bar:
            self.out.write("\r\033[K")
        self.out.write(redact_urls(text) + "\n")  # no line repeats a URL's credentials
        if self.bar:
            self.out.write(self.bar)
        self.out.flush()

    def set_bar(self, text: str) -> None:
        if self.tty and text != self.bar:
            self.bar = text
            self.out.write("\r\033[K" + text)
            self.out.flush()

    def clear_bar(self) -> None:
        if self.bar:
            self.out.write("\r\033[K")
            self.out.flush()
            self.bar = ""


class _LogTail:
    """New complete lines of a worker's log file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self.partial = ""

    def lines(self) -> list[str]:
        try:
            with self.path.open("r", encoding="utf-8", errors="replace") as f:
                f.seek(self.offset)
                data = f.read()
                self.offset = f.tell()
        except OSError:
            return []
        data = self.partial + data
        *complete, self.partial = data.split("\n")
        return complete


def run_local(
    config: TrainerConfig,
    *,
    workers: int = 1,
    gpus_per_worker: int = 0,
    output_dir: Path,
    cost_rate_per_hour: float = 0.0,
    namespace: str = "default",
    out: TextIO | None = None,
    allow_config_change: bool = False,
    accumulation_steps: int | None = None,
) -> int:
    """Run the job's workers locally; returns the exit code for the CLI.

    0 finished; 130 stopped by Ctrl-C/SIGTERM/SIGHUP (checkpointed, resumable); otherwise
    the first failing worker's code, after its error has been printed and the others
    stopped. Raises TrainerError (one line, nothing written) when the output directory is
    foreign or taken, or the job differs from the one its checkpoints were trained with.
    """
    lock = claim_run_dir(Path(output_dir))
    output_dir = lock.path  # resolved
    try:
        return _run_locked(
            config,
            workers=workers,
            gpus_per_worker=gpus_per_worker,
            output_dir=output_dir,
            cost_rate_per_hour=cost_rate_per_hour,
            namespace=namespace,
            out=out or sys.stdout,
            allow_config_change=allow_config_change,
            lock_fd=lock.fd,
            accumulation_steps=accumulation_steps,
        )
    finally:
        lock.release()


def _run_locked(
    config: TrainerConfig,
    *,
    workers: int,
    gpus_per_worker: int,
    output_dir: Path,
    cost_rate_per_hour: float,
    namespace: str,
    out: TextIO,
    allow_config_change: bool,
    lock_fd: int,
    accumulation_steps: int | None = None,
) -> int:
    console = _Console(out)
    changed = record_config(output_dir, config.to_api(), allow_change=allow_config_change)
    (output_dir / "logs").mkdir(parents=True, exist_ok=True)
    envs = worker_environments(
        config,
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        output_dir=output_dir,
        cost_rate_per_hour=cost_rate_per_hour,
        namespace=namespace,
        config_path=output_dir / CONFIG_FILE,
        accumulation_steps=accumulation_steps,
    )
    log_paths = [output_dir / "logs" / f"worker-{i}.log" for i in range(workers)]
    for env, path in zip(envs, log_paths, strict=True):
        env[ENV_LOG_FILE] = str(path)  # the trainer's log: rank 0 stores it with the artifacts
    tails = [_LogTail(p) for p in log_paths]
    acc = "" if accumulation_steps is None else f", gradient accumulation {accumulation_steps}"
    console.line(
        f"{config.job_name}: {workers} worker(s) x {max(1, gpus_per_worker)} process(es) "
        f"({'GPU' if gpus_per_worker else 'CPU'}{acc}), output {output_dir}"
    )
    console.line(
        f"metrics on http://{LOCAL_ADDR}:{envs[0][ENV_METRICS_PORT]}/metrics, "
        f"logs in {output_dir / 'logs'}"
    )
    note = None
    if changed:
        note = f"resuming with a changed job (--allow-config-change): {', '.join(changed)}"
        console.line(note + "; earlier configs in config-history.jsonl")
    procs = [
        _start_worker(env, path, lock_fd, note) for env, path in zip(envs, log_paths, strict=True)
    ]
    code, stop_requests = _supervise_until_done(procs, tails, console, output_dir)
    return _finish(console, tails[0], output_dir, code, stop_requests)


def _start_worker(
    env: dict[str, str], log_path: Path, lock_fd: int, note: str | None
) -> subprocess.Popen[bytes]:
    """`python -m kubegan_trainer` with `env`, its output appended to `log_path` after a
    banner (and the changed-job note)."""
    with log_path.open("ab") as logf:
        banner = f"=== kubegan run {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n"
        if note:
            banner += f"=== {note} ===\n"
        logf.write(banner.encode())
        logf.flush()
        # A new session: the terminal's Ctrl-C reaches only us; we forward it as
        # SIGTERM, the signal a pod gets, so the workers take the checkpoint path.
        # The run directory's lock is inherited, so it is held while any worker lives;
        # the parent-death signal ends the workers if we are killed outright.
        return subprocess.Popen(
            [sys.executable, "-m", "kubegan_trainer"],
            env=env,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(lock_fd,),
            preexec_fn=parent_death_hook(),
        )


def _supervise_until_done(
    procs: Sequence[subprocess.Popen[bytes]],
    tails: Sequence[_LogTail],
    console: _Console,
    output_dir: Path,
) -> tuple[int, int]:
    """Supervise the workers to their end, forwarding Ctrl-C, SIGTERM and SIGHUP to them
    (once as SIGTERM, then as SIGKILL); the first failing worker's code (or the first
    non-zero one) and how many stop signals came. No worker outlives it."""
    stop_requests = 0

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal stop_requests
        stop_requests += 1
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM if stop_requests == 1 else signal.SIGKILL)

    # SIGHUP (the terminal went away) stops the run like Ctrl-C instead of orphaning it.
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, on_signal) for s in handled}
    try:
        code = _supervise(procs, tails, console, output_dir, lambda: stop_requests)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return code, stop_requests


def _finish(
    console: _Console, tail: _LogTail, output_dir: Path, code: int, stop_requests: int
) -> int:
    """Rank 0's last words, then the summary table (finished) or how to resume (stopped);
    the exit code for the CLI."""
    console.clear_bar()
    for line in tail.lines():
        _echo(console, line)
    if code == 0:
        rows, unreadable = MetricsLog(output_dir / METRICS_FILE).read_rows()
        console.line("")
        console.line(summary_table(rows, unreadable))  # a note line for rows it leaves out
        console.line(
            f"\nsamples: {output_dir / 'samples'}  checkpoints: {output_dir / CHECKPOINT_SUBDIR}"
        )
        console.line(f"tensorboard --logdir {output_dir / 'tensorboard'}")
    elif stop_requests:
        console.line(f"stopped; run again with the same output directory ({output_dir}) to resume")
        code = EXIT_STOPPED
    return code


def _echo(console: _Console, line: str) -> None:
    # A worker's error line is not echoed here: _report_failure prints the failing
    # worker's, once (echoing it too printed worker 0's error twice).
    if line.startswith("[kubegan] "):
        console.line(line[len("[kubegan] ") :])


def _supervise(
    procs: Sequence[subprocess.Popen[bytes]],
    tails: Sequence[_LogTail],
    console: _Console,
    output_dir: Path,
    stop_requests: Callable[[], int],
) -> int:
    failed_at: float | None = None
    code = 0
    while True:
        for line in tails[0].lines():
            _echo(console, line)
        bar = progress_bar_for(read_progress(output_dir))
        if bar:
            console.set_bar(bar)
        codes = [p.poll() for p in procs]
        # Checked before "all exited": a lone worker that crashed must still be reported.
        failed = next(((i, c) for i, c in enumerate(codes) if c not in (None, 0)), None)
        if failed and failed_at is None and not stop_requests():
            code = failed[1]
            failed_at = time.monotonic()
            _stop_after_failure(console, procs, tails, *failed)
        if all(c is not None for c in codes):
            return code or next((c for c in codes if c), 0)
        if failed_at is not None and time.monotonic() - failed_at > KILL_GRACE_SECONDS:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.2)


def _stop_after_failure(
    console: _Console,
    procs: Sequence[subprocess.Popen[bytes]],
    tails: Sequence[_LogTail],
    index: int,
    code: int,
) -> None:
    """Worker `index` failed with `code`: say why, and stop its peers (they would wait in
    collectives until a timeout)."""
    console.clear_bar()
    _report_failure(console, index, code, tails[index].path)
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)


def _report_failure(console: _Console, index: int, code: int, log_path: Path) -> None:
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    errors = [ln for ln in lines if ln.startswith("kubegan-trainer: error:")]
    if errors:
        console.line(errors[-1])
        return
    console.line(f"worker {index} exited with code {code}; last lines of {log_path}:")
    for ln in lines[-15:]:
        console.line("  " + ln)
