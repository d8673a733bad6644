"""``captioner world train``: the world's image JEPA, text JEPA and next-token LM trained (or reused, or
resumed) through the scene lab's training (``eval.scenelab.lab.train_models``: ``captioner train``'s
accelerate loop), kept in ``captioner.world.models.world_dir``."""
from __future__ import annotations

from pathlib import Path

from captioner.errors import CaptionerError
from captioner.world.models import ENCODERS, META, PRESETS, read_meta, world_dir


def lab_config(preset: str, seed: int):
    """The scene lab's LabConfig the world's ``preset`` trains with."""
    from eval.scenelab.lab import LabConfig

    if preset not in PRESETS:
        raise CaptionerError(f"unknown world preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return LabConfig(**PRESETS[preset], seed=seed)



def _save_untrained(model, tc, path: Path) -> None:
    """The untrained text encoder (the lab's, seeded) as a checkpoint the encoder registry loads."""
    from captioner.jepa.model import count_params
    from captioner.jepa.train import FORMAT, save_checkpoint

    path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(path, {"format": FORMAT, "config": tc.to_dict(), "step": 0, "model": model.state_dict(),
                           "params": count_params(model)})


def train_world(preset: str = "lab", seed: int = 0, device: str = "cpu", progress: bool = True) -> dict:
    """Train (or reuse a finished, or resume a killed run of) the world's three models for ``preset`` and
    ``seed`` through the scene lab's training (``captioner train``'s accelerate loop; ``device`` "auto"
    takes a GPU when there is one). Returns world.json's content."""
    import time

    from captioner.paths import atomic_write_json
    from captioner.world.data import check_attributes, fingerprint
    from eval.scenelab.lab import train_models

    check_attributes()
    cfg = lab_config(preset, seed)
    out = world_dir(preset, seed)
    if (out / META).is_file():
        read_meta(out, preset, seed)            # another world or seed here: refused before any training
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    t = train_models(cfg, out, progress, device=device)
    _save_untrained(t["untrained"], t["text"][1], out / "untrained" / "checkpoint.pt")
    from dataclasses import asdict

    meta = {"preset": preset, "seed": seed, "world": fingerprint(), "config": asdict(cfg),
            "encoders": {name: str(out / run) for name, (run, _) in ENCODERS.items()},
            "seconds": round(time.time() - t0, 1)}
    atomic_write_json(out / META, meta)
    return meta
