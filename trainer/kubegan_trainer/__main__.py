"""`python -m kubegan_trainer`: the trainer container's command (DESIGN §4).

Reads the worker environment and KUBEGAN_CONFIG, then hands over to the backend of
`framework`. Backends are imported here and nowhere else, so this module and everything
framework-free start without torch or tensorflow installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kubegan_api.base import FIELD_PROBLEMS
from kubegan_api.contract import CONFIG_FILE, ENV_CONFIG, EXIT_USER_ERROR
from kubegan_api.sections import TrainerConfig
from kubegan_api.urls import redact_urls
from pydantic import ValidationError

from kubegan_trainer.base.bounded_read import regular_file_problem
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.elastic import with_accumulation
from kubegan_trainer.worker.entrypoints import load_entrypoint
from kubegan_trainer.worker.lifeline import leave
from kubegan_trainer.worker.logs import configure_logging
from kubegan_trainer.worker.startup import mark
from kubegan_trainer.worker.tpu_devices import missing_tpu

if TYPE_CHECKING:
    from kubegan_trainer.worker.driver import Hooks

# Each backend's entry module: run(env, config, hooks=None) -> exit code.
BACKENDS = {
    "pytorch": "kubegan_trainer.backends.torch.entry",
    "tensorflow": "kubegan_trainer.backends.tf.entry",
}
# The package each backend needs; a missing one is a one-line error, not a traceback.
FRAMEWORK_PACKAGES = {"pytorch": "torch", "tensorflow": "tensorflow"}


def load_config(path: str) -> TrainerConfig:
    if not path:  # Path("") is ".", a directory: say what is really wrong
        raise TrainerError(f"{ENV_CONFIG}: empty; set it to the job's {CONFIG_FILE}")
    p = Path(path)
    problem = regular_file_problem(p)  # a FIFO would block the read
    if problem is not None:
        raise TrainerError(f"{ENV_CONFIG}: {p} {problem}")
    try:
        return TrainerConfig.from_file(p)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        if first["type"] == FIELD_PROBLEMS:  # e.g. model options: the lines `validate` prints
            ctx = first["ctx"]
            rules = ctx["rules"]
            raise TrainerError(
                ctx.get("message") or "; ".join(f"spec.{where}{sub}: {m}" for sub, m in rules)
            ) from None
        raise TrainerError(f"{ENV_CONFIG}: {p}: {where}: {first['msg']}") from None
    except ValueError as err:  # JSON syntax
        raise TrainerError(f"{ENV_CONFIG}: {p} is not valid JSON ({err})") from None


def load_backend(framework: str):  # -> module with run(env, config, hooks=None) -> int
    if framework not in BACKENDS:
        raise TrainerError(f"framework: unknown framework {framework!r}")
    package = FRAMEWORK_PACKAGES[framework]
    if importlib.util.find_spec(package) is None:
        raise TrainerError(
            f"framework: {framework} is not installed in this image (no module {package!r})"
        )
    try:
        return importlib.import_module(BACKENDS[framework])
    except ModuleNotFoundError as err:
        if err.name and f"{BACKENDS[framework]}.".startswith(f"{err.name}."):
            raise TrainerError(f"framework: this trainer has no {framework} backend yet") from None
        raise


def main(hooks: Hooks | None = None) -> int:
    """The container's command. `hooks` reach the epoch driver (tests and tooling pass
    them from their own entry point; the image never does)."""
    configure_logging()
    try:
        try:
            env = ClusterEnv.from_environ()
        except ValueError as err:  # names the bad variable
            raise TrainerError(str(err)) from None
        # The launcher's accumulation for this size (an elastic job resumed at another).
        config = with_accumulation(load_config(env.config_path), os.environ)
        if config.model.entrypoint:
            # Before any backend, data or rendezvous: a name that is not a user's model
            # factory (`os:system`) is refused before anything could call it.
            load_entrypoint(config.model.entrypoint)
        # Before TensorFlow's import: tensorflow-tpu starts libtpu then, which hangs without one.
        no_tpu = missing_tpu(config, env)
        if no_tpu:
            raise TrainerError(no_tpu)
        mark("config")
        return load_backend(config.framework.value).run(env, config, hooks=hooks)
    except TrainerError as err:
        print(f"kubegan-trainer: error: {redact_urls(str(err))}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    leave(main())
