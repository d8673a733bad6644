"""A bounded mapping that forgets the least recently used entry: caches a server fills per request."""
from __future__ import annotations

from collections import OrderedDict


class LRU(OrderedDict):
    """``dict`` semantics, at most ``maxsize`` entries; reading or writing a key makes it the newest.
    Keys in ``pinned`` are never evicted (they do not count against ``maxsize``)."""

    def __init__(self, maxsize: int, pinned=()):
        super().__init__()
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, not {maxsize}")
        self.maxsize = maxsize
        self.pinned = set(pinned)

    def __getitem__(self, key):
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.move_to_end(key)
        loose = [k for k in self if k not in self.pinned]
        for k in loose[: max(0, len(loose) - self.maxsize)]:
            del self[k]
