"""COCO caption metrics: pycocoevalcap's CIDEr against a hand computation, results files, bad input."""
import json
import math
import shutil
from collections import Counter

import pytest

from captioner.errors import CaptionerError
from captioner.evaluation.coco import cider_x100, read_results, score_captions, spice_available, write_results

HAS_JAVA = shutil.which("java") is not None


def cider_pycoco(preds, refs):
    from pycocoevalcap.cider.cider import Cider

    return Cider().compute_score({k: refs[k] for k in preds}, {k: [v] for k, v in preds.items()})[0]


def ngrams(s, n):
    w = s.split()
    return Counter(tuple(w[i:i + n]) for i in range(len(w) - n + 1))


def cider_by_hand(preds, refs, sigma=6.0):
    """CIDEr from its definition (Vedantam et al. 2015, as pycocoevalcap implements it): per n-gram order,
    TF-IDF vectors g(w) = tf(w) * (log #images - log max(1, df(w))); clipped cosine min(g_c, g_r) . g_r /
    (|g_c| |g_r|); a Gaussian penalty on the difference in length (pycocoevalcap counts bigrams); mean over
    orders 1..4 and references, times 10; mean over images."""
    df = Counter()
    for k in preds:
        df.update({g for r in refs[k] for n in range(1, 5) for g in ngrams(r, n)})
    logN = math.log(len(preds))

    def tfidf(s, n):
        return {g: c * (logN - math.log(max(1.0, df[g]))) for g, c in ngrams(s, n).items()}

    total = 0.0
    for k, c in preds.items():
        acc = 0.0
        for r in refs[k]:
            pen = math.exp(-((sum(ngrams(c, 2).values()) - sum(ngrams(r, 2).values())) ** 2) / (2 * sigma ** 2))
            for n in range(1, 5):
                vc, vr = tfidf(c, n), tfidf(r, n)
                nc = math.sqrt(sum(v * v for v in vc.values()))
                nr = math.sqrt(sum(v * v for v in vr.values()))
                dot = sum(min(v, vr.get(g, 0.0)) * vr.get(g, 0.0) for g, v in vc.items())
                acc += pen * (dot / (nc * nr) if nc and nr else dot) / 4
        total += 10.0 * acc / len(refs[k])
    return total / len(preds)


def test_cider_perfect_disjoint_captions_is_exactly_ten():
    # Each prediction equals its only reference, has 4+ words and no n-gram is shared between images: every
    # clipped cosine is 1 and the length penalty is 1, so CIDEr = 10 * mean over orders of 1 = 10.
    preds = {"1": "a koala in a tree", "2": "big red fire truck", "3": "the green frog sings"}
    refs = {k: [v] for k, v in preds.items()}
    assert cider_pycoco(preds, refs) == pytest.approx(10.0, abs=1e-12)


def test_cider_matches_hand_computation_on_a_tiny_case():
    preds = {"1": "a koala in a tree", "2": "a red truck", "3": "a dog"}
    refs = {"1": ["a koala sitting in a tree", "a grey koala"], "2": ["a red fire truck"],
            "3": ["a big brown dog on the grass", "a dog"]}
    got = cider_pycoco(preds, refs)
    want = cider_by_hand(preds, refs)
    assert got == pytest.approx(want, rel=1e-12)
    # And by hand on the smallest case, fully written out: two images, one reference each, 1-grams only
    # carry weight. Image 1: pred "a cat", ref "a cat sat". "a" is in both images' references (df 2,
    # idf log2 - log2 = 0); "cat", "sat", "cat sat", "a cat" are in one (idf log 2).
    preds2 = {"1": "a cat", "2": "a dog"}
    refs2 = {"1": ["a cat sat"], "2": ["a dog"]}
    # every weighted n-gram below has idf L = log 2 (it is in one of the two images), and L cancels
    # order 1: g_c = {cat: L}, g_r = {cat: L, sat: L}: cos = L*L / (L * L*sqrt2) = 1/sqrt2
    # order 2: g_c = {"a cat": L}, g_r = {"a cat": L, "cat sat": L}: 1/sqrt2; orders 3, 4: candidate empty -> 0
    # length penalty: bigram counts 1 vs 2 -> exp(-1/72)
    img1 = 10 * (2 / math.sqrt(2)) / 4 * math.exp(-1 / 72)
    # image 2: identical to its reference; order 1: g = {dog: L} (a: idf 0) -> 1; order 2: {"a dog"} -> 1
    img2 = 10 * 2 / 4
    assert cider_pycoco(preds2, refs2) == pytest.approx((img1 + img2) / 2, rel=1e-12)
    assert score_captions(preds2, refs2, tokenized=True, meteor=False, spice="off")["CIDEr"] == \
        pytest.approx((img1 + img2) / 2, rel=1e-12)
    # CIDEr alone (the world report's scorer): the same figure on the papers' x100 scale
    assert cider_x100(preds2, refs2) == pytest.approx(100 * (img1 + img2) / 2, rel=1e-12)
    with pytest.raises(CaptionerError, match="no predictions"):
        cider_x100({}, {})


def test_score_reports_both_cider_scales_and_skips_spice_with_a_note():
    preds = {"1": "a cat", "2": "a dog"}
    refs = {"1": ["a cat sat"], "2": ["a dog"]}
    m = score_captions(preds, refs, tokenized=True, meteor=False)
    assert m["CIDEr_x100"] == pytest.approx(100 * m["CIDEr"])
    assert m["BLEU-1"] == pytest.approx(1.0 * math.exp(1 - 5 / 4))  # all 4 words match; brevity 4 vs 5
    if not spice_available():
        assert m["SPICE"] is None and any("SPICE skipped" in n for n in m["notes"])
        with pytest.raises(CaptionerError, match="SPICE asked for"):
            score_captions(preds, refs, tokenized=True, meteor=False, spice="on")


def test_bad_inputs_are_clear_errors():
    with pytest.raises(CaptionerError, match="no predictions"):
        score_captions({}, {}, tokenized=True)
    with pytest.raises(CaptionerError, match="no reference captions"):
        score_captions({"1": "a cat"}, {"2": ["a cat"]}, tokenized=True)
    with pytest.raises(CaptionerError, match="only empty reference"):
        score_captions({"1": "a cat"}, {"1": ["  "]}, tokenized=True)


def test_results_file_is_coco_format_and_round_trips(tmp_path):
    p = write_results(tmp_path / "r" / "results.json", {"391895": "a man on a bike", "animals/koala": "a koala"})
    rows = json.loads(p.read_text())
    assert rows == [{"image_id": 391895, "caption": "a man on a bike"},
                    {"image_id": "animals/koala", "caption": "a koala"}]
    assert read_results(p) == {"391895": "a man on a bike", "animals/koala": "a koala"}
    assert [f.name for f in p.parent.iterdir()] == ["results.json"]  # no temp file left behind
    (tmp_path / "bad.json").write_text('{"image_id": 1}')
    with pytest.raises(CaptionerError, match="not a COCO results file"):
        read_results(tmp_path / "bad.json")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_JAVA, reason="java not installed")
def test_full_scorer_with_ptb_tokenizer_and_meteor():
    refs = {"1": ["A koala sitting in a tree."], "2": ["A red fire truck!"]}
    preds = {"1": "A koala sitting in a tree.", "2": "A red fire truck."}
    m = score_captions(preds, refs)
    # PTB tokenisation lower-cases and drops punctuation, so both predictions equal their references
    assert m["BLEU-1"] == pytest.approx(1.0) and m["ROUGE-L"] == pytest.approx(1.0)
    assert m["METEOR"] > 0.9
    assert m["CIDEr"] == pytest.approx(cider_by_hand({"1": "a koala sitting in a tree", "2": "a red fire truck"},
                                                     {"1": ["a koala sitting in a tree"], "2": ["a red fire truck"]}))


def _coco_files(tmp_path, preds: dict, refs: dict):
    r = tmp_path / "preds.json"
    r.write_text(json.dumps([{"image_id": int(k), "caption": v} for k, v in preds.items()]))
    a = tmp_path / "captions.json"
    a.write_text(json.dumps({"images": [{"id": int(k)} for k in refs],
                             "annotations": [{"image_id": int(k), "id": i, "caption": c}
                                             for i, (k, cs) in enumerate(refs.items()) for c in cs]}))
    return r, a


@pytest.mark.slow
@pytest.mark.skipif(not HAS_JAVA, reason="java not installed")
def test_eval_coco_scores_a_results_file_against_annotations(tmp_path, capsys):
    from captioner.cli import main

    preds = {"1": "a koala in a tree", "2": "big red fire truck", "3": "the green frog sings"}
    refs = {**{k: [v] for k, v in preds.items()}, "4": ["a dog"]}
    r, a = _coco_files(tmp_path, preds, refs)
    out = tmp_path / "m.json"
    main(["eval", "coco", "--results", str(r), "--annotations", str(a), "--no-meteor", "--out", str(out)])
    m = json.loads(out.read_text())["metrics"]
    assert m["CIDEr"] == pytest.approx(10.0, abs=1e-9) and m["CIDEr_x100"] == pytest.approx(1000.0, abs=1e-6)
    assert m["n_images"] == 3 and any("1 annotated image(s) have no prediction" in n for n in m["notes"])
    assert "CIDEr (x100)" in capsys.readouterr().out


@pytest.mark.parametrize("case,msg", [
    ("unknown id", "1 image id(s) are not in"),
    ("missing caption", "entry 1 (image_id 2) has no caption"),
    ("empty caption", "has an empty caption"),
    ("not annotations", "not a COCO captions file"),
])
def test_eval_coco_results_bad_inputs_are_one_line_errors_and_write_nothing(tmp_path, capsys, case, msg):
    from captioner.cli import main

    r, a = _coco_files(tmp_path, {"1": "a cat", "9": "a dog"} if case == "unknown id" else {"1": "a cat"},
                       {"1": ["a cat"], "2": ["a dog"]})
    if case in ("missing caption", "empty caption"):
        r.write_text(json.dumps([{"image_id": 1, "caption": "a cat"},
                                 {"image_id": 2} if case == "missing caption" else {"image_id": 2, "caption": " "}]))
    if case == "not annotations":
        a.write_text(json.dumps([{"image_id": 1, "caption": "a cat"}]))
    out = tmp_path / "m.json"
    with pytest.raises(SystemExit) as e:
        main(["eval", "coco", "--results", str(r), "--annotations", str(a), "--no-meteor", "--out", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
    with pytest.raises(SystemExit) as e:
        main(["eval", "coco", "--results", str(r)])
    assert e.value.code == 2 and "--results and --annotations go together" in capsys.readouterr().err
