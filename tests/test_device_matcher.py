"""scripts/device_matcher.py (the matcher at 1M on a GPU) runs on CPU with --smoke and prints the bench row."""
from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_matcher.py"


def test_smoke_prints_the_bench_row(tmp_path, capsys):
    pytest.importorskip("torch")
    row = runpy.run_path(str(SCRIPT), run_name="device_matcher")["main"](["--smoke", "--out", str(tmp_path / "r.json")])
    assert (row["n"], row["dim"], row["noise"], row["device"]) == (3000, 384, 0.05, "cpu")
    assert row["ours"]["accuracy"] == 1.0 and row["oracle"]["nearest"] == 1.0 and row["ours"]["peak_rss_mb"] > 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| N | d | noise") and any(line.startswith("| 3000 | 384 | 0.05 | 1.0 |") for line in out)
    assert json.loads(out[-1]) == row == json.loads((tmp_path / "r.json").read_text())


@pytest.mark.slow
def test_a_cpu_only_machine_is_told_to_use_smoke():
    if pytest.importorskip("torch").cuda.is_available():
        pytest.skip("a GPU is present: the script would run the 1M check")
    done = subprocess.run([sys.executable, str(SCRIPT), "--n", "1000"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "no CUDA device" in done.stderr and "--smoke" in done.stderr
