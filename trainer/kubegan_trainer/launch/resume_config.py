"""A resumed run trains with the configuration its checkpoints were trained with.

`config.json` in a run directory records the job the checkpoints came from. Resuming
with different data, seed, batch size, learning rate, model, ... would silently mix two
trainings and make config.json lie, so it is refused naming the differing fields,
unless explicitly allowed; then `config-history.jsonl` keeps every earlier config and
what changed, and config.json describes the run from then on.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kubegan_api.contract import CHECKPOINT_SUBDIR, CONFIG_FILE

from kubegan_trainer.base.errors import TrainerError

HISTORY_FILE = "config-history.jsonl"
# Sections whose change alters what the checkpoints mean. Not compared: epochs (running
# longer is how a finished run is extended), checkpoint cadence, monitoring, strategy.
COMPARED_SECTIONS = ("framework", "model", "data", "training")
IGNORED_FIELDS = frozenset({"training.epochs"})


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Dotted paths (spec.…) where `old` and `new` differ, with both values."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if sub in IGNORED_FIELDS:
                continue
            out += differences(old.get(key), new.get(key), sub)
        return out
    if old == new:
        return []
    return [f"spec.{path} ({_short(old)} -> {_short(new)})"]


def _short(value: Any) -> str:
    text = "unset" if value is None else json.dumps(value, sort_keys=True)
    return text if len(text) <= 40 else text[:37] + "..."


def _trained(config: dict[str, Any]) -> dict[str, Any]:
    return {k: config.get(k) for k in COMPARED_SECTIONS}


def _as_written_now(old: dict[str, Any]) -> dict[str, Any]:
    """`old` as this kubegan writes it: a config.json from an earlier kubegan lacks the fields
    added since, which hold their defaults, so upgrading is not a change of job
    (spec.data.uri "unset -> ''" refused every resume). One that no longer validates is
    compared as it stands."""
    from kubegan_api.sections import TrainerConfig

    try:
        return TrainerConfig.model_validate(old).to_api()
    except (ValueError, TypeError):  # pydantic's ValidationError is a ValueError
        return old


def has_checkpoints(output_dir: Path) -> bool:
    ckpts = output_dir / CHECKPOINT_SUBDIR
    return ckpts.is_dir() and any(p.name.startswith("ckpt-") for p in ckpts.iterdir())


def record_config(output_dir: Path, config: dict[str, Any], *, allow_change: bool) -> list[str]:
    """Write config.json for this run; returns the changed fields (empty for a fresh or
    unchanged run). Raises TrainerError when checkpoints exist, the training-relevant
    config differs from theirs and `allow_change` is false."""
    path = output_dir / CONFIG_FILE
    changed: list[str] = []
    if has_checkpoints(output_dir) and path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise TrainerError(
                f"{path}: unreadable ({err}); it records what the checkpoints in "
                f"{output_dir / 'checkpoints'} were trained with"
            ) from None
        if not isinstance(old, dict):
            raise TrainerError(f"{path}: not a kubegan config (expected a JSON object)")
        changed = differences(_trained(_as_written_now(old)), _trained(config))
        if changed and not allow_change:
            raise TrainerError(
                f"{output_dir}: the job differs from the one its checkpoints were trained "
                f"with: {', '.join(changed)}; use another --output, or "
                "--allow-config-change to resume anyway"
            )
        if changed:
            entry = {"time": time.time(), "changed": changed, "previous": old}
            line = (json.dumps(entry, sort_keys=True) + "\n").encode("utf-8")
            fd = os.open(output_dir / HISTORY_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return changed
