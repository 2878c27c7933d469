"""The operator's collector settings (heap.py): fewer young collections, and the state loaded
at startup frozen once, so full collections stop re-walking it."""

from __future__ import annotations

import gc

from kubegan_operator.runtime import heap


def test_collector_tuned_and_loaded_state_frozen_once() -> None:
    before = gc.get_threshold()
    try:
        heap.tune()
        assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
        assert gc.get_threshold()[1:] == before[1:]
        heap._frozen = False
        loaded = [{"node": i} for i in range(1000)]  # what the indexes hold after the listing
        heap.freeze_loaded_state()
        frozen = gc.get_freeze_count()
        assert frozen >= len(loaded)
        later = [{"pod": i} for i in range(1000)]  # arrives after: collected as usual
        heap.freeze_loaded_state()  # every event calls it; only the first freezes
        assert gc.get_freeze_count() == frozen and later
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
        heap._frozen = False
