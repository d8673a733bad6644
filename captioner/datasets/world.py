"""``world``: the JEPA world's seeded scene splits (``captioner.world.data``)."""
from __future__ import annotations

from captioner.datasets.base import CaptionDataset, Sample


def world(split: str = "test", seed: int = 0, **kw) -> CaptionDataset:
    """The JEPA world (``captioner.world.data``): seeded train / val / test splits of its scenes."""
    from captioner.world.data import world_samples

    samples = [Sample(*t) for t in world_samples(split, seed=seed, **kw)]
    return CaptionDataset("world", split, samples, labels=sorted({s.label for s in samples}))
