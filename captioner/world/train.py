"""``captioner world train``: the world's image JEPA, text JEPA and next-token LM trained (or reused, or
resumed) through the world's training recipe (``captioner.world.recipe.train_models``: ``captioner train``'s
accelerate loop), kept in ``captioner.world.models.world_dir``."""
from __future__ import annotations

from pathlib import Path

from captioner.errors import CaptionerError
from captioner.world.models import ENCODERS, META, PRESETS, check_scenes, read_meta, world_dir


def lab_config(preset: str, seed: int, scenes: str = "all"):
    """The scene lab's LabConfig the world's ``preset`` trains with, on ``scenes`` ("all", or the seed's
    "train" scenes: ``LabConfig.scenes``)."""
    from captioner.world.recipe import LabConfig

    if preset not in PRESETS:
        raise CaptionerError(f"unknown world preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return LabConfig(**PRESETS[preset], seed=seed, scenes=check_scenes(scenes))



def _save_untrained(model, tc, path: Path) -> None:
    """The untrained text encoder (the lab's, seeded) as a checkpoint the encoder registry loads."""
    from captioner.jepa.model import count_params
    from captioner.jepa.train import FORMAT, save_checkpoint

    path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(path, {"format": FORMAT, "config": tc.to_dict(), "step": 0, "model": model.state_dict(),
                           "params": count_params(model)})


def train_world(preset: str = "lab", seed: int = 0, device: str = "cpu", progress: bool = True,
                scenes: str = "all") -> dict:
    """Train (or reuse a finished, or resume a killed run of) the world's three models for ``preset`` and
    ``seed`` on ``scenes`` ("all", or only the train scenes of the seed's split: ``world_dir``'s ``-train``) through the world's training recipe (``captioner train``'s accelerate loop; ``device`` "auto"
    takes a GPU when there is one). Returns world.json's content."""
    import time

    from captioner.paths import atomic_write_json
    from captioner.world.data import check_attributes, fingerprint
    from captioner.world.recipe import kept_name, train_models

    check_attributes()
    cfg = lab_config(preset, seed, scenes)
    out = world_dir(preset, seed, scenes)
    main = _agree(preset, seed, device, out)
    if (out / META).is_file():
        read_meta(out, preset, seed, scenes)          # another world or seed here: refused before any training
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    t = train_models(cfg, out, progress, device=device)
    from dataclasses import asdict

    # each model's restarts [(init seed, final loss)] and the kept one (the lowest loss; the first when trained once)
    restarts = {kind: t[side][3] for kind, side in (("image-jepa", "image"), ("text-jepa", "text"),
                                                    ("ntp", "ntp"))}
    runs = {kind: kept_name(kind, losses) for kind, losses in restarts.items()}
    meta = {"preset": preset, "seed": seed, **({} if scenes == "all" else {"scenes": scenes}),
            "world": fingerprint(), "config": asdict(cfg),
            "encoders": {name: str(out / runs.get(run, run)) for name, (run, _) in ENCODERS.items()},
            "runs": runs, "restarts": restarts, "seconds": round(time.time() - t0, 1)}
    if main is None or main.is_main_process:
        _save_untrained(t["untrained"], t["text"][1], out / "untrained" / "checkpoint.pt")
        atomic_write_json(out / META, meta)
    if main is not None:
        from captioner.distributed import collective

        with collective("the end of the world's training"):
            main.wait_for_everyone()            # world.json is there when any process returns
    return meta


def _agree(preset: str, seed: int, device: str, out: Path):
    """Under several processes (``accelerate launch``): check, before anything is written, that every
    process was given the same world (preset, seed, device, world config, folder; one-line error on every
    process otherwise) and return the launch's state; None in a single process."""
    from captioner.distributed import agree, process_state, world_size

    if world_size() <= 1:
        return None
    import torch

    from captioner.world.data import fingerprint

    # the same choice of backend as the training's Accelerator (captioner.jepa.processes.make_accelerator)
    state = process_state(cpu=device == "cpu" or not torch.cuda.is_available())
    agree("the world to train", {"preset": preset, "seed": seed, "device": device, "world config": fingerprint(),
                                 "world folder": str(out), "finished": (out / META).is_file()},
          hint="start every process with the same arguments and the same CAPTIONER_HOME (a shared filesystem)")
    return state
