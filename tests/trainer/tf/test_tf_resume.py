"""MultiWorkerMirroredStrategy with 2 worker processes (TF_CONFIG
from build_worker_env) ends with identical weights on both workers; SIGTERM mid-epoch
then resume continues at the saved step with no repeated or skipped batches (1 worker
with 2 replicas in process, and 2 worker processes), ending where an uninterrupted run
ends."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from kubegan_api.contract import EXIT_INTERRUPTED
from kubegan_trainer.worker.driver import Hooks

from tests.trainer.tf.tfutil import RunResult, run_workers, tf_config, trainer


def _all_weights(t) -> np.ndarray:
    return np.concatenate([np.ravel(v.numpy()) for v in t.G.weights + t.D.weights])


@pytest.mark.timeout(300)
def test_single_worker_sigterm_mid_epoch_then_resume_is_exact(tmp_path: Path) -> None:
    cfg = tf_config("dcgan", epochs=2, stepsPerEpoch=5)
    seen_a: list[tuple[int, int, list[int]]] = []
    seen_b: list[tuple[int, int, list[int]]] = []

    def record(into: list, sigterm_at: int | None = None):
        def hook(t, epoch0: int, done: int, info: dict) -> None:
            into.append((epoch0, done, sorted(info["index"].tolist())))
            if sigterm_at is not None and info["global_step"] == sigterm_at:
                os.kill(os.getpid(), signal.SIGTERM)  # the real signal path, mid-epoch 1

        return Hooks(on_step=hook)

    a = trainer(cfg, tmp_path / "a", record(seen_a))
    assert a.fit() == 0
    previous = signal.getsignal(signal.SIGTERM)
    try:
        b = trainer(cfg, tmp_path / "b", record(seen_b, sigterm_at=2))
        b.stop.install()
        assert b.fit() == EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    stopped_after = len(seen_b)
    assert 0 < stopped_after < 5  # stopped inside the first epoch
    manifests = sorted((tmp_path / "b" / "checkpoints").glob("ckpt-*/manifest.json"))
    saved = json.loads(manifests[-1].read_text())
    assert (saved["epoch"], saved["step"]) == (0, stopped_after)
    c = trainer(cfg, tmp_path / "b", record(seen_b))
    assert c.fit() == 0
    assert seen_b == seen_a  # every batch once, in order: none repeated, none skipped
    assert np.array_equal(_all_weights(a), _all_weights(c))  # DESIGN §5: bitwise on CPU
    rows = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2]


def _cfg():
    return tf_config("dcgan", epochs=2, stepsPerEpoch=4)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    result = run_workers(_cfg(), tmp_path_factory.mktemp("mw") / "full", workers=2)
    assert result.codes == [0, 0], result.logs
    return result


@pytest.mark.timeout(300)
def test_multi_worker_mirrored_two_processes_end_with_same_weights(
    uninterrupted: RunResult,
) -> None:
    logs = uninterrupted.logs
    assert "MultiWorkerMirroredStrategy, 2 workers, 2 replicas in sync (RING)" in logs[0]
    w0, w1 = uninterrupted.weights(0), uninterrupted.weights(1)
    for net in ("generator", "discriminator"):
        assert np.array_equal(w0[net], w1[net]), net
    # The workers trained on different halves of every global batch.
    t0, t1 = uninterrupted.trace(0), uninterrupted.trace(1)
    assert len(t0) == len(t1) == 8
    for a, b in zip(t0, t1, strict=True):
        assert not set(a["index"]) & set(b["index"])


@pytest.mark.timeout(420)
def test_multi_worker_sigterm_then_resume_continues_at_saved_step(
    uninterrupted: RunResult, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    # Worker 1 gets SIGTERM after its 2nd step: both workers agree to stop, checkpoint, exit.
    first = run_workers(_cfg(), out, workers=2, sigterm_at="1:2")
    assert first.codes == [EXIT_INTERRUPTED, EXIT_INTERRUPTED], first.logs
    saved = json.loads(sorted((out / "checkpoints").glob("ckpt-*/manifest.json"))[-1].read_text())
    assert saved["epoch"] == 0 and 0 < saved["step"] < 4
    stopped = [len(first.trace(w)) for w in (0, 1)]
    assert stopped == [saved["step"], saved["step"]]
    second = run_workers(_cfg(), out, workers=2)
    assert second.codes == [0, 0], second.logs
    assert f"resumed from epoch 0, step {saved['step']} of epoch 1" in second.logs[0]
    for w in (0, 1):
        assert second.trace(w) == uninterrupted.trace(w)  # the trace file holds both runs
        for net in ("generator", "discriminator"):
            assert np.array_equal(second.weights(w)[net], uninterrupted.weights(w)[net]), (w, net)
