"""The training loop's batches and checks when it runs as several processes (``accelerate launch``).

Every step's global batch is drawn from (seed, step) alone and each process trains on its slice, so N
processes see exactly the batches one process sees; with the global-batch regularisers and BatchNorm of
``captioner.distributed`` they compute the same loss and gradients (up to float summation order).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from captioner.errors import CaptionerError

# Config fields that do not change what is trained (where and how fast it runs).
RUNTIME_FIELDS = ("threads", "device")


def make_accelerator(cfg):
    """The run's Accelerator (one process, or this one of a launch)."""
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    # several processes on a machine without GPUs: accelerate counts them only when told it runs on CPU
    several = int(os.environ.get("WORLD_SIZE", "1")) > 1
    kw = {"cpu": cfg.device == "cpu" or (several and not torch.cuda.is_available()), "mixed_precision": cfg.precision}
    try:
        return Accelerator(**kw)
    except ValueError:
        # accelerate keeps one process-wide state; a second run in the same process with another precision
        # (tests, `python -m eval scaling`) needs it reset
        AcceleratorState._reset_state(True)
        return Accelerator(**kw)


def _step_seed(seed: int, step: int, rank: int = 0) -> int:
    return int(np.random.SeedSequence([seed, step, rank]).generate_state(1, dtype=np.uint64)[0] >> 1)


def step_batch(data, cfg, step: int, rank: int, world: int):
    """This process's rows of the step's global batch, and the step's torch generator.

    The global batch (and the generator, which later draws the SIGReg directions) depends on (seed, step)
    alone, so N processes train on exactly the batches one process would, each on its 1/N slice."""
    import torch

    s = _step_seed(cfg.seed, step)
    torch.manual_seed(s)   # dropout and the SIGReg directions: same draws after a resume
    rng = np.random.default_rng(s)
    gen = torch.Generator().manual_seed(s)
    batch = data.batch(rng, cfg.batch_size, generator=gen) if cfg.kind == "image-jepa" else data.batch(rng, cfg.batch_size)
    if world == 1:
        return batch, gen
    per = cfg.batch_size // world
    lo, hi = rank * per, (rank + 1) * per

    def cut(x):
        return tuple(cut(y) for y in x) if isinstance(x, tuple) else x[lo:hi]

    return {k: cut(v) for k, v in batch.items()}, gen


def _data_signature(data) -> dict:
    """Sizes of a batch source, for the processes of a launch to compare (same corpus files everywhere)."""
    sig = {"type": type(data).__name__}
    for name in ("counts", "docs", "images"):
        v = getattr(data, name, None)
        if v is not None:
            sig[name] = [len(v), int(np.asarray(v).sum()) if name == "counts" else None]
    return sig


def check_processes(acc, cfg, out: Path, resume: bool, start: int, data, n_params: int) -> None:
    """Several processes: the global batch must split evenly, and every process must have resolved the
    same run (config, folder, checkpoint step, corpus sizes), else all stop with the same one-line error."""
    from captioner.distributed import agree

    if acc.num_processes == 1:
        return
    if cfg.batch_size % acc.num_processes:
        raise CaptionerError(f"--batch-size {cfg.batch_size} does not split evenly over {acc.num_processes} "
                             f"processes; use a multiple of {acc.num_processes} (the global batch is what one "
                             "process would train on)")
    run = {k: v for k, v in cfg.to_dict().items() if k not in RUNTIME_FIELDS}
    agree("the training run", {**run, "out": str(out), "resume": resume, "checkpoint_step": start,
                               "data": _data_signature(data), "params": n_params},
          hint="start every process with the same arguments, and give each the same corpus and run folder "
               "(a shared filesystem)")


def python_rng_to_list(state) -> list:
    """``random.getstate()`` = (version, tuple of 625 ints, gauss_next) as a flat list (weights_only-safe)."""
    version, internal, gauss = state
    return [version, gauss if gauss is not None else "none", *internal]


def python_rng_from_list(flat) -> tuple:
    """The inverse of :func:`python_rng_to_list`, for ``random.setstate``."""
    version, gauss, *internal = flat
    return (version, tuple(internal), None if gauss == "none" else gauss)
