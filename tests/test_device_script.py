"""scripts/device_train_109m.py runs on CPU with --smoke and reports the throughput JSON."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("device_train_109m", ROOT / "scripts" / "device_train_109m.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_smoke_reports_throughput(tmp_path, capsys):
    pytest.importorskip("torch")
    res = _load().main(["--smoke", "--out", str(tmp_path / "r.json")])
    assert res["preset"] == "tiny" and res["timed_steps"] == 3 and res["device"] == "cpu"
    assert res["samples_per_s"] > 0 and res["tokens_per_s"] == pytest.approx(
        res["samples_per_s"] * 2 * res["seq_len"], rel=1e-3)
    # 6 N T / s / peak, recomputed by hand from the reported figures
    want = 6 * res["trained_params"] * res["tokens_per_s"] / 1e12 / 989.0
    assert res["fraction_of_bf16_peak"] == pytest.approx(want, rel=1e-2, abs=1e-4)
    assert json.loads((tmp_path / "r.json").read_text()) == res
    assert json.loads(capsys.readouterr().out) == res


@pytest.mark.slow
def test_without_gpu_and_without_smoke_it_says_so():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "device_train_109m.py"), "--max-steps", "1"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "--smoke" in p.stderr
