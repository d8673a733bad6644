"""The world's trained encoders, as the registry finds them: ``captioner world train``
(``captioner.world.train``) trains the image JEPA, the text JEPA and the next-token LM and keeps them as
encoders of the registry (``world-image-jepa``, ``world-text-jepa``, ``world-ntp``, ``world-ntp-last``, ``world-untrained``).

A world folder ``<home>/world/<preset>-s<seed>`` holds one run folder per model and ``world.json``
(written last: the preset, the seed, the world's fingerprint and the lab config); the encoders refuse a
folder without it, or one trained on another world or seed. Encoders trained on the seed's train scenes only
(``captioner world train --scenes train``, ``LabConfig.scenes``) live beside them in ``<preset>-s<seed>-train``:
the registry names them with ``&scenes=train``.
"""
from __future__ import annotations

import json
from pathlib import Path

from captioner.errors import CaptionerError

# the lab's training at two scales: "lab" is the scene lab's own (12,000 scenes, 4,800 / 3,200 steps);
# "quick" trains in about a minute on 2 cores (for tests and the CI chain), "gpu" is larger (device check);
# "smoke" trains each model 4 steps on 64 scenes (seconds): it checks the command and a launch of several
# processes (tests/test_distributed.py), its models are not a usable world
PRESETS = {
    "smoke": {"n_train": 64, "image_steps": 4, "text_steps": 4, "batch_size": 16},
    "quick": {"n_train": 600, "image_steps": 150, "text_steps": 150, "batch_size": 32},
    # the smallest world that is one: the headline test trains it from nothing (tests/test_world_headline.py)
    "ci": {"n_train": 4000, "image_steps": 1500, "text_steps": 1000},
    # the ci world with 32-d embeddings, wider than the 12-d lattice (`python -m eval experiment world-wide`)
    "ci32": {"n_train": 4000, "image_steps": 1500, "text_steps": 1000, "embed_dim": 32},
    # one restart policy for every encoder (issue 40): each of the image JEPA, the text JEPA and the next-token
    # LM is trained 3 times (init seeds seed, seed + 1000, seed + 2000) and the run with the lowest final
    # training loss is kept; no label, no pair, no test figure in the choice
    "lab": {"restarts": 3},
    # the lab world with 32-d embeddings, each model trained once (`python -m eval experiment world-wide --preset lab32`)
    "lab32": {"embed_dim": 32},
    "gpu": {"n_train": 24000, "image_steps": 4800, "text_steps": 3200, "batch_size": 128},
}
# registry name -> (run folder, pooling)
ENCODERS = {"world-image-jepa": ("image-jepa", None), "world-text-jepa": ("text-jepa", None),
            "world-ntp": ("ntp", "mean"), "world-ntp-last": ("ntp", "last"), "world-untrained": ("untrained", None)}
META = "world.json"


def world_dir(preset: str, seed: int, scenes: str = "all") -> Path:
    """``<home>/world/<preset>-s<seed>``, with ``-<scenes>`` after it unless the encoders trained on all scenes."""
    from captioner.paths import home

    check_scenes(scenes)
    return home() / "world" / (f"{preset}-s{seed}" + ("" if scenes == "all" else f"-{scenes}"))


def check_scenes(scenes: str) -> str:
    """``scenes`` ("all" or "train": ``LabConfig.scenes``), refused in one line otherwise."""
    if scenes not in ("all", "train"):
        raise CaptionerError(f"unknown world training scenes {scenes!r}; choose all or train")
    return scenes


def train_command(preset: str, seed: int, scenes: str = "all") -> str:
    return f"captioner world train --preset {preset} --seed {seed}" + ("" if scenes == "all" else f" --scenes {scenes}")


def read_meta(folder: Path, preset: str, seed: int, scenes: str = "all") -> dict:
    """The world.json of ``folder``, checked: the same world (fingerprint), preset and seed; else a
    one-line error naming the command that trains the right one."""
    from captioner.world.data import fingerprint

    p = Path(folder) / META
    if not p.is_file():
        raise CaptionerError(f"no trained world models for preset {preset!r}, seed {seed} in {folder}; "
                             f"train them with `{train_command(preset, seed, scenes)}`")
    meta = json.loads(p.read_text())
    fp = fingerprint()
    if meta.get("world") != fp:
        raise CaptionerError(f"{folder} holds models of another world config (fingerprint {meta.get('world')}, "
                             f"this world {fp}); delete it and run `{train_command(preset, seed, scenes)}`")
    if meta.get("seed") != seed or meta.get("preset") != preset:
        raise CaptionerError(f"{folder} holds the world models of preset {meta.get('preset')!r}, seed "
                             f"{meta.get('seed')}, not {preset!r}, seed {seed}; delete it and run "
                             f"`{train_command(preset, seed, scenes)}`")
    if meta.get("scenes", "all") != scenes:   # world.json of before the option: all scenes
        raise CaptionerError(f"{folder} holds world models trained on {meta.get('scenes', 'all')} scenes, not "
                             f"{scenes}; delete it and run `{train_command(preset, seed, scenes)}`")
    return meta


def default_preset(seed: int, scenes: str = "all") -> str:
    """The preset whose trained world exists for ``seed`` ("lab" first), or "lab" when none does."""
    for p in ("lab", "gpu", "quick"):
        if (world_dir(p, seed, scenes) / META).is_file():
            return p
    return "lab"


def checkpoint_for(name: str, preset: str | None = None, seed: int = 0, scenes: str = "all") -> tuple[Path, str | None]:
    """(checkpoint path, pooling) of the registry encoder ``name`` (``world-text-jepa`` ...) trained on
    ``scenes`` ("all", or the seed's "train" scenes), checked."""
    from captioner.jepa.train import load_checkpoint

    if name not in ENCODERS:
        raise CaptionerError(f"unknown world encoder {name!r}; known: {', '.join(ENCODERS)}")
    preset = preset or default_preset(seed, scenes)
    folder = world_dir(preset, seed, scenes)
    meta = read_meta(folder, preset, seed, scenes)
    run, pool = ENCODERS[name]
    path = folder / (meta.get("runs") or {}).get(run, run) / "checkpoint.pt"
    if not path.is_file():   # e.g. the kept restart's folder deleted by hand
        raise CaptionerError(f"{path} is missing (world.json names it); run `{train_command(preset, seed, scenes)}` to "
                             "train it again")
    ck = load_checkpoint(path)
    # restart r of a JEPA trains from seed + 1000 r (captioner.world.recipe.RESTART_SEED_STEP; not imported here:
    # this runs whenever a world encoder loads)
    if run != "untrained" and (ck["config"].get("seed", -1) - seed) % 1000:
        raise CaptionerError(f"{path} was trained with seed {ck['config'].get('seed')}, not {seed}; delete "
                             f"{folder} and run `{train_command(preset, seed, scenes)}`")
    return path, pool
