"""bench/demo_latency.py runs end to end on the fake pipeline and reports the pipeline's own timings."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "bench" / "demo_latency.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("demo_latency", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_on_the_fake_pipeline(bench, tmp_path, capsys):
    out = tmp_path / "lat.json"
    res = bench.main(["--pipeline", "tests.demo_fakes:FakePipeline", "--n", "4", "--warmup", "1",
                      "--out", str(out)])
    assert json.loads(out.read_text()) == res
    r, d = res["modes"]["retrieval"], res["modes"]["decoded"]
    # the fake reports encode 1.0 ms, rotate + retrieve 0.5 ms, and 2.0 ms of decoding only when decoding
    assert (r["encode"]["median_ms"], r["rotate_retrieve"]["median_ms"], r["decode"]["median_ms"]) == (1.0, 0.5, 0.0)
    assert d["decode"]["p95_ms"] == 2.0 and r["total"]["n"] == 4
    assert r["total"]["median_ms"] >= r["image_decode"]["median_ms"] > 0
    assert res["pipeline"]["image_encoder"] == "fake-image" and res["target"]["median_ms"] == 150.0
    text = capsys.readouterr().out
    assert "rotate + retrieve" in text and "target: retrieval median < 150 ms" in text
