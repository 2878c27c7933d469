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
