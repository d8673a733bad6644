"""`make eval`'s closing table, from the metrics files the eval commands write."""
import json

from eval.cli import main
from eval.summary import collect, table


def _write(p, obj):
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj))


def test_summary_joins_caption_and_zeroshot_runs_into_one_table(tmp_path, capsys):
    runs = tmp_path / "runs"
    _write(runs / "eval-coco/tuxpaint-test/retrieval-paired/a--b/metrics.json",
           {"rotation": "paired", "captioner": "retrieval",
            "metrics": {"CIDEr": 0.186, "CIDEr_x100": 18.6, "BLEU-4": 0.071, "METEOR": 0.074}})
    _write(runs / "eval-zeroshot/tuxpaint-test/paired-templates/a--b/metrics.json",
           {"mode": "paired", "top1": 0.506, "top5": 0.765, "chance_top1": 1 / 15, "chance_top5": 5 / 15,
            "n_classes": 15})
    _write(runs / "eval-zeroshot/tuxpaint-test/cluster-templates/a--b/metrics.json",
           {"mode": "cluster", "top1": 0.2, "top5": 0.5, "chance_top1": 1 / 15, "chance_top5": 5 / 15})
    rows = collect(runs)
    assert [r["rotation"] for r in rows] == ["paired", "cluster"]
    t = table(rows).splitlines()
    assert t[2] == "| paired | 0.186 | 18.6 | 7.1 | 7.4 | 0.506 | 0.765 | 0.067 / 0.333 |"
    assert t[3].startswith("| cluster | - | - |")
    assert main(["summary", "--runs", str(runs)]) == 0
    assert json.loads((runs / "summary.json").read_text())["rows"][0]["retrieval"]["CIDEr_x100"] == 18.6
    assert "CIDEr (x100)" in capsys.readouterr().out
    assert main(["summary", "--runs", str(tmp_path / "none")]) == 1
