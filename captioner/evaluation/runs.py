"""What the product's evaluation and the experiments' report build on: the pipeline and test split an
evaluation runs on (``build_eval_pipeline``), a seeded subset of a split (``subset``), the runs folder
(``runs_dir``) and the rotation / zero-shot choices the commands offer."""
from __future__ import annotations

from pathlib import Path

from captioner.errors import CaptionerError
from captioner.rotations import ALL as ROTATIONS

# ``text`` is no rotation: the text-only ceiling (each image's own reference caption embedding as the query)
ROTATION_CHOICES = [*ROTATIONS, "text"]
ZEROSHOT_MODES = [*ROTATIONS, "cluster"]  # cluster: k-means + QAP, no rotation (Blind Match)


def subset(ds, n: int | None, seed: int = 0):
    """The first ``n`` samples of ``ds`` after a seeded shuffle (a new split name, so caches stay apart)."""
    if not n or n >= len(ds):
        return ds
    import numpy as np

    from captioner.datasets import CaptionDataset

    order = np.random.default_rng(seed).permutation(len(ds))[:n]
    return CaptionDataset(ds.name, f"{ds.split}-sub{n}-s{seed}", [ds.samples[i] for i in sorted(order)],
                          labels=ds.labels, root=ds.root, skipped=ds.skipped)


def build_eval_pipeline(coco_root=None, image_encoder="efficientnet-lite0", text_encoder="minilm-l6", device="cpu",
                        progress=True, beam=1, decoder_preset=None, train_limit=20000, test_limit=None,
                        pairfree_max=2000, decode_input="auto", world=None):
    """(Pipeline, test set) for the embedded Tux Paint test split, or the COCO Karpathy test split under
    ``coco_root`` (bank, pairs and decoder corpus from the Karpathy train split, at most ``train_limit``
    images), or with ``world=(preset, seed, split)`` the JEPA world's ``split`` through the world's own
    pipeline (``captioner.world.demo.world_pipeline``: its image and text JEPAs, its train captions as the
    bank, the lattice matcher's pair-free map, the world's decoder reading the rotated render)."""
    from captioner.datasets import get_dataset
    from captioner.pipeline import Pipeline

    if world is not None:
        from captioner.world.demo import world_pipeline

        preset, seed, split = world
        if split == "train":
            raise CaptionerError("--split train: the world's train split is its bank and its pairs; "
                                 "evaluate on val or test")
        return world_pipeline(preset, seed, progress), subset(get_dataset("world", split, seed=seed), test_limit)
    preset = decoder_preset or ("base" if str(device).startswith("cuda") else "small")
    kw = dict(image_encoder=image_encoder, text_encoder=text_encoder, device=device, progress=progress, beam=beam,
              decoder_preset=preset, pairfree_max=pairfree_max, decode_input=decode_input)
    if coco_root is None:
        test = get_dataset("tuxpaint", split="test")
        return Pipeline.default(**kw), test
    root = Path(coco_root)
    if not root.exists():
        raise CaptionerError(f"--coco-root {root}: no such folder (expected dataset_coco.json and the images)")
    test = subset(get_dataset("coco", split="test", root=root), test_limit)
    train = subset(get_dataset("coco", split="train", root=root), train_limit)
    pipe = Pipeline(train_set=train, exclude=test.captions(), decoder_corpus="bank", **kw)
    return pipe, test


def runs_dir(*parts) -> Path:
    """``$CAPTIONER_HOME/runs/<parts...>``, each part made safe as a folder name (no / : ? & =)."""
    import re

    from captioner.paths import subdir

    return subdir("runs").joinpath(*[re.sub(r"[/:?&=]", "_", p) for p in parts])
