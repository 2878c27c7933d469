"""TensorFlow trainer tests: split the CPU into 2 logical devices before TF starts, so
MirroredStrategy has 2 replicas in this process (the strategy code reads the variable)."""

from __future__ import annotations

import os

from kubegan_api.contract import ENV_TF_LOGICAL_CPUS

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ[ENV_TF_LOGICAL_CPUS] = "2"
