"""Which checkpoints are kept besides the newest `keep`: the `keepBest` with the best primary
quality score (spec.checkpoint.keepBest), and which one is the best to export. Pure.

A checkpoint written at an epoch end carries its epoch's primary score in its manifest
(`"score": {"metric": ..., "value": ..., "higherIsBetter": ...}`, worker/quality.py names
the metric per model); mid-epoch checkpoints and runs whose data has no score carry none.
The manifest is data anyone with write access to the store could have edited, so a score of
the wrong shape counts as no score rather than as an error: such a checkpoint is only ever
kept by recency.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCORE_KEY = "score"  # the manifest field
_NAME_LIMIT = 64


@dataclass(frozen=True)
class Score:
    metric: str
    value: float
    higher_is_better: bool

    def to_manifest(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": self.value, "higherIsBetter": self.higher_is_better}


def score_from(extra: Mapping[str, Any]) -> Score | None:
    """The score a manifest's extra fields carry, or None (absent, malformed, not finite)."""
    raw = extra.get(SCORE_KEY)
    if not isinstance(raw, Mapping):
        return None
    metric, value, higher = raw.get("metric"), raw.get("value"), raw.get("higherIsBetter")
    if not isinstance(metric, str) or not 0 < len(metric) <= _NAME_LIMIT:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not isinstance(higher, bool)
    ):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return Score(metric, number, higher) if math.isfinite(number) else None


def ranked(scored_newest_first: Sequence[tuple[str, Score | None]]) -> list[str]:
    """Names of the scored checkpoints, best first. Only scores of the newest scored
    checkpoint's metric and direction compare (a job whose model changed its primary metric
    is not ranked across the change); equal scores rank the newer first."""
    scores = [(name, s) for name, s in scored_newest_first if s is not None]
    if not scores:
        return []
    ref = scores[0][1]
    same = [
        (n, s)
        for n, s in scores
        if (s.metric, s.higher_is_better) == (ref.metric, ref.higher_is_better)
    ]
    sign = -1.0 if ref.higher_is_better else 1.0
    order = sorted(range(len(same)), key=lambda i: (sign * same[i][1].value, i))
    return [same[i][0] for i in order]


def best_kept(scored_newest_first: Sequence[tuple[str, Score | None]], keep_best: int) -> set[str]:
    """The `keep_best` checkpoints with the best scores (none when keep_best is 0)."""
    return set(ranked(scored_newest_first)[:keep_best]) if keep_best > 0 else set()


def to_export(scored_newest_first: Sequence[tuple[str, Score | None]]) -> str | None:
    """The checkpoint whose generator is exported: the best scored one, else the newest."""
    best = ranked(scored_newest_first)
    if best:
        return best[0]
    return scored_newest_first[0][0] if scored_newest_first else None
