"""``python tests/dist_worker.py <captioner arguments>``: the captioner CLI as one process of a launch, for
tests/test_distributed.py. With ``DIE_RANK`` set, that process is killed (``os._exit(9)``: no message, no
cleanup, like the OOM killer) when it reaches ``DIE_AT``: "encode" (its first image batch), "step:N"
(the batch of training step N) or "step:N:KIND" (step N of the model KIND: image-jepa, text-jepa, ntp; for
`captioner world train`, which trains the three in turn)."""
from __future__ import annotations

import os
import sys


def _arm() -> None:
    rank = int(os.environ.get("RANK", "0"))
    if os.environ.get("DIE_RANK") != str(rank):
        return
    at = os.environ.get("DIE_AT", "encode")
    if at == "encode":
        import captioner.cache as cache

        def die(sources):
            os._exit(9)

        cache._load_images = die
    elif at.startswith("step:"):
        import captioner.jepa.processes as proc

        real, n, kind = proc.step_batch, int(at.split(":")[1]), (at.split(":") + [None])[2]

        def step_batch(data, cfg, step, rank, world):
            if step + 1 == n and kind in (None, cfg.kind):
                os._exit(9)
            return real(data, cfg, step, rank, world)

        proc.step_batch = step_batch


if __name__ == "__main__":
    _arm()
    from captioner.cli import main

    main(sys.argv[1:])
