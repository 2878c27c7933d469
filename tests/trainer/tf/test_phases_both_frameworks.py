"""gan3d's phase list is one declaration (kubegan_trainer.worker.phases)
that both frameworks execute: the same optimizer updates in the same order, the CERN 3DGAN
schedule (D on real, D on fake, two G updates with fresh noise)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubegan_trainer.worker.phases import GAN3D

from tests.trainer.tf.tfutil import tf_config, trainer
from tests.trainer.util import config, single_rank_trainer

TINY = {"size": "tiny", "numSamples": 8}


@pytest.mark.timeout(300)
def test_gan3d_runs_the_same_phases_in_the_same_order_in_both_frameworks(tmp_path: Path) -> None:
    expected = GAN3D.updates()
    assert expected == [
        "discriminator:d_loss_real",
        "discriminator:d_loss_fake",
        "generator:g_loss",
        "generator:g_loss",
    ]

    cfg = config(
        "gan3d", options=TINY, data={"source": "synthetic"}, batchSizePerReplica=4, stepsPerEpoch=1
    )
    with single_rank_trainer(cfg, tmp_path / "torch") as tr:
        tr.phase_log = []
        assert tr.fit() == 0
        torch_log = tr.phase_log
        # Adam counts its updates: two per network in one iteration.
        steps = {
            name: int(opt.state[next(iter(net.parameters()))]["step"])
            for name, opt, net in (("d", tr.opt_d, tr.D), ("g", tr.opt_g, tr.G))
        }
    assert torch_log == expected
    assert steps == {"d": 2, "g": 2}

    t = trainer(tf_config("gan3d", options=TINY, stepsPerEpoch=1), tmp_path / "tf")
    t.phase_log = []
    assert t.fit() == 0
    assert t.replicas == 2  # recorded while tf.function traces replica 0's step
    assert t.phase_log == expected
    assert (int(t.opt_d.iterations.numpy()), int(t.opt_g.iterations.numpy())) == (2, 2)
