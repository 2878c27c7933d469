"""Moved to tests/support/world.py (the one world builder, issue 23); this re-export keeps a
test written against the old path working until it imports from there."""

from tests.support.world import node, pod

__all__ = ["node", "pod"]
