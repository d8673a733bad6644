"""eval/experiments/alignment_realdata.py scoring helpers on synthetic embedding sets (the real run needs the models)."""
from __future__ import annotations

import numpy as np
import pytest

from alignment.procrustes import fit_procrustes, fit_random, random_orthogonal
from captioner.cache import EmbeddingSet
from eval.experiments.alignment_realdata import _summary, evaluate, table


def _sets(rng, n=40, d=12):
    X = rng.standard_normal((n, d))
    sids = [f"s{i}" for i in range(n)]
    caps = np.concatenate([X @ random_orthogonal(d, 1), X @ random_orthogonal(d, 1) + 0.01])  # 2 captions each
    img = EmbeddingSet(X=X, ids=sids, sample_ids=sids, meta={"modality": "image"})
    txt = EmbeddingSet(X=caps, ids=[f"{s}#{j}" for j in (0, 1) for s in sids], sample_ids=sids + sids,
                       meta={"modality": "text"})
    return img, txt


def test_evaluate_perfect_map_and_floor(rng):
    img, txt = _sets(rng)
    rot = fit_procrustes(img.X, txt.X[:40])
    r = evaluate(rot, img, txt)
    assert r["R@1"] == 1.0 and r["median_rank"] == 1.0 and r["n_keys"] == 80
    assert r["chance@1"] == pytest.approx(2 / 80)  # two correct captions among 80
    assert r["mutual_knn"] > 0.95
    runs = [evaluate(fit_random(img.X, txt.X, seed=s), img, txt) for s in range(3)]
    s = _summary(runs)
    assert s["runs"] == 3 and s["R@1"] < 0.5 and s["R@1_sd"] >= 0
    res = {"setup": {"image_encoder": "a", "text_encoder": "b", "train_pairs": 40, "test_images": 40,
                     "test_captions": 80},
           "maps": {"paired": r, "random": s},
           "encoders_test_alignment": {"mutual_knn": {"score": 0.5, "null_mean": 0.1, "null_std": 0.01, "z": 40.0}}}
    t = table(res)
    assert "| paired | 1.000 |" in t and " ± " in t and "mutual_knn 0.500" in t
