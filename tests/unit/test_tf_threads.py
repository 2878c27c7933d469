"""The TensorFlow trainer's thread count, read as torch reads OMP_NUM_THREADS (the pools
themselves: tests/trainer/tf/test_tf_worker_start.py)."""

from __future__ import annotations

import pytest
from kubegan_api.contract import ENV_CPU_THREADS
from kubegan_trainer.backends.tf.threads import cpu_threads


@pytest.mark.parametrize(
    ("raw", "threads"),
    [
        ("1", 1),
        ("8", 8),
        (" 2 ", 2),
        ("0", None),
        ("-1", None),
        ("two", None),
        ("1.5", None),
        ("", None),
    ],
)
def test_only_a_positive_whole_number_sizes_the_pools(raw: str, threads: int | None) -> None:
    assert cpu_threads({ENV_CPU_THREADS: raw}) == threads


def test_unset_leaves_tensorflow_to_decide() -> None:
    assert cpu_threads({}) is None
