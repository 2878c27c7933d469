"""Write the bytecode of every module kubegan's processes import, once, at install time.

Each trainer worker, `kubegan run` and the operator is a fresh Python process. Where
PYTHONDONTWRITEBYTECODE is set (CI images often set it), none of them can cache compiled
modules, and every process recompiles torch and TensorFlow from source: ~30 s of CPU per
worker start on a 2-core machine. The Makefile runs this with the variable cleared, so
the compiled files land in .venv (never in the repository) and later processes read them.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time

# Imported lazily by the libraries themselves, or by our modules inside functions, so walking
# our packages does not reach them. tensorboardX (with the boto3 it tries) and Pillow's
# plugins: rank 0 imports them at its first epoch's end, ~0.5 s to compile in every run.
LAZY = (
    "torch._dynamo",
    "torch.distributed.algorithms.join",
    "torch.utils.serialization",
    "sklearn.linear_model",
    "tensorboardX",
    "tensorboardX.summary",
    "PIL.BmpImagePlugin",
    "PIL.GifImagePlugin",
    "PIL.JpegImagePlugin",
    "PIL.PpmImagePlugin",
    "google.protobuf.struct_pb2",
    "tensorflow.python.data.ops.flat_map_op",
    "tensorflow.python.data.ops.from_generator_op",
    "tensorflow.python.data.ops.from_tensors_op",
)
PACKAGES = ("kubegan_api", "kubegan_trainer", "kubegan_operator")


def main() -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    start = time.monotonic()
    names = list(LAZY)
    for package in PACKAGES:
        root = importlib.import_module(package)
        names += [m.name for m in pkgutil.walk_packages(root.__path__, f"{package}.")]
    for name in names:
        importlib.import_module(name)
    seconds = time.monotonic() - start
    print(f"warm-bytecode: {len(names)} modules and their imports in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
