"""The scaling study's configuration: ``ScalingConfig``, its presets, the methods (how each is trained and
read) and when two configs share runs. No training here."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ScalingConfig:
    name: str = "cpu"
    model_preset: str = "tiny"
    methods: list = field(default_factory=lambda: ["text-jepa", "ntp"])
    ns: list = field(default_factory=lambda: [256, 512, 1024, 2048, 4096])   # samples seen
    # more sample counts for one method only (e.g. NTP further out, where it might start to align); they
    # join that method's law and the ratio bound
    extra_ns: dict = field(default_factory=dict)
    seeds: list = field(default_factory=lambda: [0, 1, 2])
    batch_size: int = 32
    lr: float = 4e-3              # as the scene lab
    embed_dim: int = 12           # the scene lab's LATENT_DIM
    n_train: int = 3000           # scene-lab training scenes (text corpus and image renders)
    n_test: int = 324             # held-out (render, caption) pairs: every scene-lab scene once
    image_steps: int = 300
    image_batch: int = 64
    k: int = 10
    world_seed: int = 0
    # train every run as ``python -m eval scenelab`` trains its models (its objective: SIGReg weight 0.1 and
    # linear predictors; its warm-up and checkpoints; the image JEPA with its steps), with this config's
    # n_train, batch_size, lr and embed_dim: the largest JEPA run is then the lab's text JEPA, its steps
    # and seed the lab's. False: the short runs of the cpu preset (preset objective, warm-up n / 10)
    lab: bool = False


PRESETS = {
    # about 20 minutes on one core: tiny models, 5 sample counts x 3 seeds x 2 methods, NTP also further out
    # (to 262,144 samples, where a ratio bound above the paper's 42x becomes possible)
    "cpu": ScalingConfig(extra_ns={"ntp": [16384, 65536, 262144]}),
    # seconds: for tests of the machinery only
    "quick": ScalingConfig(name="quick", ns=[64, 128, 256, 512], seeds=[0, 1], batch_size=16,
                           extra_ns={"ntp": [1024]}, n_train=200,
                           n_test=60, image_steps=20, image_batch=32, k=5),
    # the scene lab's own training, from 100 to 3200 steps of batch 64 (the lab's text budget) on its
    # 12,000 scenes, both methods at the same budgets, NTP also at 8x its largest (to 25,600 steps, where
    # a ratio bound above the paper's 42x becomes possible), read at its mean (the baseline) and
    # at its last token (same models); the JEPA also below 100 steps, where NTP's last token gets to. About
    # 2.5 hours on 2 cores with --workers 2
    "lab": ScalingConfig(name="lab", lab=True, methods=["text-jepa", "ntp", "ntp-last"],
                         ns=[6400, 12800, 25600, 51200, 102400, 204800],
                         extra_ns={"ntp": [409600, 819200, 1638400], "ntp-last": [409600, 819200, 1638400],
                                   "text-jepa": [1600, 3200]},
                         batch_size=64, n_train=12000, image_steps=4800, image_batch=64),
    # machinery tests of the lab mode (seconds)
    "quick-lab": ScalingConfig(name="quick-lab", lab=True, ns=[64, 128, 256], seeds=[0, 1], batch_size=16,
                               n_train=200, n_test=60, image_steps=20, image_batch=16, k=5),
    # longer curves (a GPU, or an hour of CPU)
    "full": ScalingConfig(name="full", ns=[1024, 2048, 4096, 8192, 16384, 32768, 65536], seeds=[0, 1, 2],
                          batch_size=64, n_train=20000, n_test=500, image_steps=2000),
}


# how each method's model is trained (its kind) and its text embedded: "ntp-last" is the next-token LM of
# "ntp" (same training, same seed: the same model) read at its last token instead of its mean
METHODS = {"text-jepa": ("text-jepa", "mean"), "ntp": ("ntp", "mean"), "ntp-last": ("ntp", "last")}


def siblings(method: str) -> list[str]:
    """The methods whose runs train the same model as ``method`` (one training serves them all)."""
    return [m for m in METHODS if METHODS[m][0] == METHODS[method][0]]


# which runs a config plans (methods, sample counts, seeds) does not change how any one run is trained: a folder's
# runs serve every config that differs from its own in these only
_PLAN_FIELDS = ("methods", "ns", "extra_ns", "seeds")


def compatible(old: dict, new: dict) -> bool:
    """True when the runs in a folder written under config ``old`` are valid runs of config ``new``: the
    two agree on everything but the plan (``_PLAN_FIELDS``), so a run (method, n, seed) is trained and
    measured the same way under both. Adding sample counts or seeds to a preset then reuses every run
    done."""
    def strip(d):
        return {k: v for k, v in d.items() if k not in _PLAN_FIELDS}
    return strip(old) == strip(new)
