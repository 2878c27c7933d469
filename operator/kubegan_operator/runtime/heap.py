"""The operator's garbage collector, tuned for a process that holds a large, long-lived heap.

At 1000 nodes the indexes hold hundreds of thousands of objects that live as long as the
operator, and every watch event allocates thousands more that die at once (its parsed JSON).
With CPython's default thresholds the collector ran thousands of young collections and a
full one every few seconds, each walking the whole heap: 18 % of the operator's CPU in a
1000-node benchmark (bench/README.md). The data is acyclic JSON, freed by reference counting
when it dies; the cyclic collector only has to find the rare cycles (asyncio tasks and
exceptions), and it need not re-walk the heap the operator loaded at startup to do so.
"""

from __future__ import annotations

import gc

# Young collections every 20 000 net allocations instead of 700: most of an event's objects
# die before one runs, so fewer are promoted and full collections come far less often.
YOUNG_THRESHOLD = 20_000

_frozen = False


def tune() -> None:
    """At startup: collect less often (thresholds above)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def freeze_loaded_state() -> None:
    """Once the initial listings are loaded (kopf calls no handler before every index holds
    its listing): move everything alive now to the permanent generation, so later full
    collections do not walk it again. Objects frozen here are still freed by reference
    counting when they die; only a cycle among them would outlive its use. Once only."""
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.collect()
    gc.freeze()
