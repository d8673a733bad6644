"""``captioner align fit|score`` and the experiments' ``python -m eval align bench`` end to end on tiny
synthetic caches."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from alignment.errors import MismatchError
from alignment.procrustes import Rotation, random_orthogonal
from captioner.cli import cli
from captioner.errors import CacheMismatchError, CaptionerError
from eval.cli import cli as eval_cli

N, D = 150, 16


def _write_cache(path, X, ids, sample_ids, encoder, modality, texts=None):
    """A cache in captioner.cache's on-disk format (safetensors array + JSON sidecar)."""
    from safetensors.numpy import save_file

    save_file({"X": np.ascontiguousarray(X, dtype=np.float32)}, str(path))
    meta = {"format": 1, "key": f"k-{modality}", "encoder": encoder, "dataset": "synthetic", "split": "train",
            "modality": modality, "N": len(X), "D": X.shape[1], "ids": ids, "sample_ids": sample_ids,
            "skipped": [], "n_skipped": 0, "created": "2026-01-01T00:00:00"}
    if texts is not None:
        meta["texts"] = texts
    path.with_suffix(".json").write_text(json.dumps(meta))
    return path


@pytest.fixture
def caches(tmp_path):
    """Images (N, D) with a power-law spectrum; two captions per image = rotated image + small noise."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D)) * np.arange(1, D + 1) ** -0.5 + 2.0
    Q = random_orthogonal(D, 1)
    sids = [f"s{i:03d}" for i in range(N)]
    caps = np.concatenate([X @ Q + 0.01 * rng.standard_normal((N, D)) for _ in range(2)])  # (2N, D)
    tsids = sids + sids
    tids = [f"{s}#0" for s in sids] + [f"{s}#1" for s in sids]
    fi = {"name": "fake-image", "modality": "image", "dim": D, "pooling": "mean", "weights_hash": "i1"}
    ft = {"name": "fake-text", "modality": "text", "dim": D, "pooling": "mean", "weights_hash": "t1"}
    a = _write_cache(tmp_path / "img.safetensors", X, sids, sids, fi, "image")
    b = _write_cache(tmp_path / "txt.safetensors", caps, tids, tsids, ft, "text", texts=[f"c{i}" for i in range(2 * N)])
    return a, b, Q, X


def _run(args):
    """``captioner ARGS``, or ``python -m eval ARGS`` for the benchmark (``align bench``)."""
    r = CliRunner().invoke(eval_cli if args[:2] == ["align", "bench"] else cli, args, catch_exceptions=True)
    return r


def test_fit_procrustes_recovers_rotation_and_saves(caches, tmp_path):
    a, b, Q, X = caches
    r = _run(["align", "fit", "--method", "procrustes", "-a", str(a), "-b", str(b), "--out", str(tmp_path / "R"),
              "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["pairing"]["n_pairs"] == N and "mean" in s["pairing"]["text_row"]
    assert s["retrieval_on_fit_caches"]["R@1"] == 1.0
    rot = Rotation.load(tmp_path / "R", x_encoder={"name": "fake-image", "dim": D})
    assert np.abs(rot.R - Q).max() < 0.01  # two captions of noise 0.01 averaged
    assert rot.meta["datasets"] == {"image": "synthetic/train", "text": "synthetic/train"}
    with pytest.raises(MismatchError, match="fake-text"):
        Rotation.load(tmp_path / "R", y_encoder={"name": "minilm-l6"})
    # through the CLI, the same mismatch is a one-line CacheMismatchError
    other = {"name": "other-text", "modality": "text", "dim": D, "pooling": "mean", "weights_hash": "t2"}
    c = _write_cache(tmp_path / "txt2.safetensors", np.zeros((1, D)) + 1, ["s000#0"], ["s000"], other, "text")
    r = _run(["align", "score", "-a", str(a), "-b", str(c), "--rotation", str(tmp_path / "R")])
    assert isinstance(r.exception, CacheMismatchError) and "refit" in str(r.exception)


def test_fit_pairfree_uses_no_pairs_and_matches_every_image(caches, tmp_path):
    a, b, Q, X = caches
    r = _run(["align", "fit", "-m", "pairfree", "-a", str(a), "-b", str(b), "--out", str(tmp_path / "P"), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["pairing"]["n_pairs"] == 0 and s["pairing"]["shuffled"] and s["pairing"]["n_texts"] == 2 * N
    assert s["pairfree"]["match_accuracy_diagnostic"] == 1.0
    assert s["retrieval_on_fit_caches"]["R@1"] == 1.0
    rot = Rotation.load(tmp_path / "P.safetensors")
    assert rot.method == "pairfree" and np.abs(rot.matrix() / rot.scale - Q).max() < 0.02


@pytest.mark.parametrize("method", ["ridge", "random"])
def test_fit_other_methods_and_human_output(caches, tmp_path, method):
    a, b, _, _ = caches
    r = _run(["align", "fit", "-m", method, "-a", str(a), "-b", str(b)])  # default --out under CAPTIONER_HOME
    assert r.exit_code == 0, r.output
    assert f"{method} map 16 -> 16" in r.output and "R@1" in r.output
    rot_files = list((tmp_path / "captioner-home" / "rotations").glob(f"{method}-*.safetensors"))
    assert len(rot_files) == 1


def test_score_with_null_and_rotation(caches, tmp_path):
    a, b, _, _ = caches
    _run(["align", "fit", "-a", str(a), "-b", str(b), "--out", str(tmp_path / "R")])
    r = _run(["align", "score", "-a", str(a), "-b", str(b), "--metric", "mutual_knn", "--metric", "cka",
              "--null", "5", "--rotation", str(tmp_path / "R"), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    by = {m["metric"]: m for m in s["metrics"]}
    assert by["cka"]["score"] > 0.99 and by["mutual_knn"]["score"] > 0.9
    assert by["mutual_knn"]["null_mean"] < 0.2 and by["mutual_knn"]["z"] > 10
    assert s["retrieval"]["R@1"] == 1.0 and s["retrieval"]["foscttm"] < 1e-3  # the true map: partners nearest
    human = _run(["align", "score", "-a", str(a), "-b", str(b), "--metric", "all"])
    assert human.exit_code == 0 and "svcca" in human.output and "cknna" in human.output


def test_errors_are_one_line_captioner_errors(caches, tmp_path):
    a, b, _, _ = caches
    r = _run(["align", "fit", "-a", str(b), "-b", str(b)])
    assert isinstance(r.exception, CaptionerError) and "holds text embeddings" in str(r.exception)
    r = _run(["align", "score", "-a", str(a), "-b", str(b), "--metric", "nope"])
    assert isinstance(r.exception, CaptionerError) and "unknown metric" in str(r.exception)
    r = _run(["align", "fit", "-a", str(a), "-b", str(b), "--dim", "40"])
    assert isinstance(r.exception, CaptionerError) and "exceeds" in str(r.exception)
    r = _run(["align", "fit", "-a", str(tmp_path / "missing.safetensors"), "-b", str(b)])
    assert isinstance(r.exception, CaptionerError) and "no embedding cache" in str(r.exception)


def test_bench_small(tmp_path):
    r = _run(["align", "bench", "--n", "300", "--dim", "16", "--gw-max-n", "100", "--procrustes", "2000x32",
              "--json", "--out", str(tmp_path / "b.json")])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    row = res["matchers"][0]
    assert row["ours"]["accuracy"] == 1.0 and "skipped" in row["gw"]
    assert res["procrustes"]["ours_max_err"] < 0.01
    assert json.loads((tmp_path / "b.json").read_text())["matchers"][0]["n"] == 300


def test_bench_noise_overlap_prints_the_oracle_beside_the_matcher(tmp_path):
    r = _run(["align", "bench", "--n", "400", "--dim", "16", "--no-gw", "--procrustes", "none",
              "--noise", "0.1", "--overlap", "0.8", "--json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.output)["matchers"][0]
    assert row["noise"] == 0.1 and row["overlap"] == 0.8 and row["oracle"]["assignment"] > 0.95
    assert row["ours"]["accuracy"] >= row["oracle"]["assignment"] - 0.05 and isinstance(row["load_avg"], float)
    r = _run(["align", "bench", "--n", "400", "--overlap", "1.5", "--procrustes", "none"])
    assert r.exit_code != 0 and "--overlap must be in (0, 1]" in str(r.exception)


def test_fit_lattice_matcher_from_the_cli(tmp_path):
    """``--matcher lattice --cards``: images and captions of one skewed attribute lattice, shuffled apart;
    every image is matched to a caption of its own item. Without --cards the cards are estimated from each cloud."""
    from alignment.lattice import ideal_lattice

    rng = np.random.default_rng(0)
    scenes, E = ideal_lattice((3, 2, 3))
    w = np.prod([[0.5, 0.4, 0.6][a] ** scenes[:, a] for a in range(3)], axis=0)
    pick = rng.choice(len(E), 400, p=w / w.sum())
    Q = random_orthogonal(E.shape[1], 3)
    sids = [f"p{j}" for j in pick]                      # one sample per lattice point: its id
    ids = [f"r{i}" for i in range(len(pick))]
    fi = {"name": "fake-image", "modality": "image", "dim": E.shape[1], "pooling": "mean", "weights_hash": "i1"}
    ft = {"name": "fake-text", "modality": "text", "dim": E.shape[1], "pooling": "mean", "weights_hash": "t1"}
    a = _write_cache(tmp_path / "img.safetensors", E[pick], ids, sids, fi, "image")
    b = _write_cache(tmp_path / "txt.safetensors", E[pick] @ Q, [f"{i}#0" for i in ids], sids, ft, "text",
                     texts=[f"c{i}" for i in range(len(pick))])
    r = _run(["align", "fit", "-m", "pairfree", "--matcher", "lattice", "--cards", "3,2,3", "-a", str(a), "-b", str(b),
              "--out", str(tmp_path / "L"), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["pairfree"]["match_accuracy_diagnostic"] == 1.0 and s["pairing"]["matcher"] == "lattice"
    r = _run(["align", "fit", "-m", "pairfree", "--matcher", "lattice", "-a", str(a), "-b", str(b),
              "--out", str(tmp_path / "L2"), "--json"])   # no --cards: estimated from each cloud
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["pairfree"]["match_accuracy_diagnostic"] == 1.0


def test_bench_real_synthetic_rows_and_matchers_list(tmp_path):
    """``python -m eval align bench --real synthetic``: every row has the oracle, chance and each matcher's FOSCTTM; the JSON
    file is written as rows finish; an unknown matcher is one line listing the registry."""
    out = tmp_path / "real.json"
    r = _run(["align", "bench", "--real", "synthetic", "--real-n", "300", "--matchers", "ours",
              "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    rows = {(row["pool"], row["setting"]): row for row in res["rows"]}
    assert len(rows) == 8 and json.loads(out.read_text())["rows"] == res["rows"]
    clustered = rows[("synthetic-clustered", "same")]
    assert clustered["chance"]["foscttm"] == 0.5 and clustered["oracle"]["foscttm"] < 0.01
    assert clustered["methods"]["ours"]["foscttm"] < 0.01 and clustered["methods"]["ours"]["match_accuracy"] > 0.9
    r = _run(["align", "bench", "--real", "quick", "--matchers", "ours,nope"])
    assert r.exit_code != 0 and "unknown matcher 'nope'; known: auto, ours" in str(r.exception)
    r = _run(["align", "matchers"])
    assert r.exit_code == 0 and r.output.splitlines()[0].startswith("auto ")
    assert len(r.output.splitlines()) == len(__import__("alignment.pairfree").pairfree.MATCHERS)
