"""The JEPA objective's own optimum on the scene lab's view kernel (``lookup_optimum``): an encoder of
unlimited capacity and perfect perception, one free vector per latent scene."""
from __future__ import annotations

import numpy as np

from captioner.world.scenes import ATTRS, CORRUPT, LATENT_DIM, all_scenes, latent_features


def lookup_optimum(reg: str = "vicreg", reg_weight: float = 0.1, steps: int = 2000, batch_size: int = 128,
                   lr: float = 3e-2, dim: int = LATENT_DIM, corrupt: float = CORRUPT, seed: int = 0,
                   init: str = "random") -> np.ndarray:
    """The JEPA objective optimised over a lookup table: one free ``dim``-vector per latent scene.

    That is an encoder with unlimited capacity that perceives every observation perfectly, so what it
    converges to is the objective's own optimum on this world's view kernel, apart from any encoder.
    The views are the world's observations (each attribute misreported with probability ``corrupt``),
    the loss is the JEPAs' own (``model.JEPA.forward`` with a linear predictor and a stop-gradient
    target: ``(1 - w) * prediction + w * regulariser``). ``init``: "random" (Gaussian rows) or "latents"
    (start at the ideal, ``latent_features``; needs ``dim`` = LATENT_DIM) to see whether the objective
    keeps it or moves away. Returns the (324, dim) table, rows in ``all_scenes()`` order.
    """
    import torch

    from captioner.jepa.model import JEPA, ObjectiveConfig

    if reg not in ("vicreg", "sigreg", "cov"):
        raise ValueError(f"lookup_optimum: reg must be 'vicreg', 'sigreg' or 'cov', not {reg!r}")
    if init not in ("random", "latents") or (init == "latents" and dim != LATENT_DIM):
        raise ValueError(f"lookup_optimum: init must be 'random' or 'latents' (with dim {LATENT_DIM}), not {init!r}")

    class TableJEPA(JEPA):
        """JEPA whose encoder is a free table row per scene index: the loss is JEPA.forward's own."""

        def __init__(self, start, obj):
            super().__init__(start.shape[1], obj)
            self.encoder = torch.nn.Embedding.from_pretrained(start, freeze=False)
            self._make_target()

        @staticmethod
        def _run(enc, idx):
            return enc(idx)

        def embed(self, idx):
            return self.encoder(idx)

    sizes = [len(v) for v in ATTRS.values()]
    codes = np.array(np.unravel_index(np.arange(int(np.prod(sizes))), sizes)).T     # (324, 5), product order
    place = np.array([int(np.prod(sizes[i + 1:])) for i in range(len(sizes))])
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)                                                          # the predictor's init

    def observe_idx(b):
        wrong = rng.random((len(b), len(sizes))) < corrupt
        other = np.stack([rng.integers(k, size=len(b)) for k in sizes], 1)
        return torch.from_numpy((np.where(wrong, other, codes[b]) * place).sum(1))

    start = (torch.from_numpy(latent_features(all_scenes())) if init == "latents"
             else 0.5 * torch.randn(len(codes), dim, generator=gen))
    model = TableJEPA(start, ObjectiveConfig(reg=reg, reg_weight=reg_weight, pred_hidden=0, target="stopgrad"))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    # constant, then a linear decay to 0 over the last quarter: settles in the optimum it found
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, 4.0 * (1 - i / steps)))
    for _ in range(steps):
        b = rng.integers(len(codes), size=batch_size)
        loss = model((observe_idx(b),), (observe_idx(b),), generator=gen)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    table = model.encoder.weight
    return table.detach().numpy().astype(np.float32)
