"""What every TensorFlow worker start (and restart) pays: TensorFlow imported without Keras's
unused optional packages, which still import afterwards (the digits loader needs
scikit-learn); the train step traced without autograph for the built-in models, with it for a
user's model, which may branch on tensors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kubegan_api.contract import ENV_CPU_THREADS

from tests.trainer.tf.tfutil import REPO, tf_config, trainer

PROBE = """
import json, sys
import pandas  # already imported by the user's code: stays as it is
from kubegan_trainer.backends.tf.lean_import import import_tensorflow
import_tensorflow()
loaded = {name: name in sys.modules for name in ("tensorflow", "sklearn", "matplotlib", "pandas")}
import keras.src.trainers.data_adapters.array_slicing as slicing
import keras.src.wrappers.fixes as fixes
from sklearn.datasets import load_digits
print(json.dumps({
    "loaded": loaded,
    "keras_sees_pandas": slicing.pandas is not None,
    "keras_sees_sklearn": fixes.sklearn is not None,
    "digits": list(load_digits().data.shape),
}))
"""


def test_tensorflow_loads_without_keras_extras_and_they_import_later() -> None:
    env = {"PYTHONPATH": f"{REPO / 'trainer'}:{REPO / 'api'}", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["loaded"] == {
        "tensorflow": True,
        "sklearn": False,
        "matplotlib": False,
        "pandas": True,
    }
    assert seen["keras_sees_pandas"] is True
    assert seen["keras_sees_sklearn"] is False
    assert seen["digits"] == [1797, 64]


@pytest.mark.parametrize(
    ("model", "entrypoint", "autograph"),
    [("dcgan", "", False), ("custom", "tests.trainer.tf.custom_models:tiny_pair", True)],
)
def test_autograph_converts_only_a_users_model(
    tmp_path: Path, model: str, entrypoint: str, autograph: bool
) -> None:
    built = trainer(tf_config(model, entrypoint=entrypoint), tmp_path)
    assert built._train_step._autograph is autograph


THREADS_PROBE = """
import json, os, tensorflow as tf
from kubegan_trainer.backends.tf.threads import size_thread_pools
size_thread_pools(os.environ)
tf.constant(1.0) + 1.0  # the runtime starts with its pools as sized
print(json.dumps([tf.config.threading.get_intra_op_parallelism_threads(),
                  tf.config.threading.get_inter_op_parallelism_threads()]))
"""


@pytest.mark.parametrize(
    ("extra", "pools"),
    [
        ({ENV_CPU_THREADS: "1"}, [1, 1]),
        ({ENV_CPU_THREADS: "1", "TF_NUM_INTRAOP_THREADS": "2"}, [0, 0]),
    ],
)
def test_tensorflows_pools_follow_the_workers_threads_unless_the_user_sized_them(
    extra: dict[str, str], pools: list[int]
) -> None:
    """0 is TensorFlow's "not set": its own variables then decide, as the user asked."""
    env = {"PYTHONPATH": f"{REPO / 'trainer'}:{REPO / 'api'}", "TF_CPP_MIN_LOG_LEVEL": "3", **extra}
    done = subprocess.run(
        [sys.executable, "-c", THREADS_PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == pools
