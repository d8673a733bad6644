"""eval/scenelab_objective: the lookup-table report's structure and its known answer at the latents."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")


def test_report_rows_and_table():
    from eval.scenelab.objective import run, table

    res = run(regs=("vicreg",), steps=60, seeds=(0, 1), from_latents=True)
    (row,) = res["rows"]
    assert row["reg"] == "vicreg" and len(row["residual_vs_latents"]) == 2
    # started at the latents, 60 VICReg steps keep them (the optimum): residual near 0
    assert row["residual_from_latents"] < 0.06
    # 60 steps from random starts are far from converged: well above that
    assert min(row["residual_vs_latents"]) > row["residual_from_latents"]
    assert 0.8 < res["mutual_knn_ceiling"] < 0.9
    g = res["per_attribute_reference"]          # measured: 0.071 / 0.500
    assert 0.05 < g["residual"] < 0.1 and 0.4 < g["mutual_knn"] < 0.6
    t = table(res)
    assert t.count("\n| vicreg |") == 1 and "residual, started at the latents" in t
    assert f"residual {g['residual']:.3f}, mutual 10-NN" in t
