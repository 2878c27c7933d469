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

# Imported lazily by the libraries themselves, so walking our packages does not reach them.
LAZY = ("torch._dynamo", "torch.distributed.algorithms.join", "sklearn.linear_model")
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
