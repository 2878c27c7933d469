"""gan3d from TFRecord shards (FILE auto-shard policy): written from synthetic showers,
read back through tf.data, trained on 2 replicas; each example once per epoch."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubegan_trainer.data.showers import synthetic_showers
from kubegan_trainer.driver import Hooks
from kubegan_trainer.tf_backend.data import write_shower_shards

from tests.trainer.tf.tfutil import tf_config, trainer


@pytest.mark.timeout(300)
def test_gan3d_trains_from_tfrecord_shards(tmp_path: Path) -> None:
    shards = write_shower_shards(synthetic_showers(32, seed=3), tmp_path / "shards", num_shards=4)
    assert len(shards) == 4
    seen: list[int] = []
    cfg = tf_config(
        "gan3d",
        options={"size": "tiny"},
        data={"source": "files", "path": str(tmp_path / "shards")},
        stepsPerEpoch=2,
    )
    t = trainer(
        cfg,
        tmp_path / "out",
        Hooks(on_step=lambda _t, _e, _s, info: seen.extend(info["index"].tolist())),
    )
    assert t.source.auto_shard.name == "FILE" and t.source.num_samples == 32
    assert t.fit() == 0
    assert len(seen) == 2 * 4 * 2 and len(set(seen)) == len(seen)  # steps x batch x replicas
    assert (tmp_path / "out" / "samples" / "epoch-0001.png").is_file()
