"""COCO caption metrics through pycocoevalcap: PTB tokenizer, BLEU-1..4, METEOR, ROUGE-L, CIDEr (and SPICE
when its Stanford CoreNLP jars are present; it would otherwise try to download them).

CIDEr is reported on both scales and every key says which: ``CIDEr`` is pycocoevalcap's own value (0..10,
usually below 2), ``CIDEr_x100`` is the same number times 100 as papers print it (CapDec 91.8 on COCO).
The other metrics are fractions in 0..1 (pycocoevalcap's scale); tables print them x100 and say so.
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from captioner.errors import CaptionerError
from captioner.paths import atomic_write_json

METRIC_KEYS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "CIDEr_x100")
SPICE_NOTE = ("SPICE skipped: its Stanford CoreNLP 3.6.0 jars are not in pycocoevalcap/spice/lib (SPICE would "
              "download them at first use, and this machine is offline)")


def _pkg_dir() -> Path:
    import pycocoevalcap

    return Path(list(pycocoevalcap.__path__)[0])


def spice_available() -> bool:
    """True when SPICE can run offline: the CoreNLP jar and its models jar sit in ``spice/lib``."""
    try:
        lib = _pkg_dir() / "spice" / "lib"
    except ImportError:
        return False
    return all((lib / f"stanford-corenlp-3.6.0{s}.jar").exists() for s in ("", "-models"))


def _check_inputs(preds: dict, refs: dict) -> None:
    if not preds:
        raise CaptionerError("no predictions to score (0 images)")
    missing = [k for k in preds if k not in refs]
    if missing:
        raise CaptionerError(f"{len(missing)} predicted image id(s) have no reference captions "
                             f"(first: {missing[0]!r})")
    no_ref = [k for k in preds if not [r for r in refs[k] if r and r.strip()]]
    if no_ref:
        raise CaptionerError(f"{len(no_ref)} image id(s) have only empty reference captions (first: {no_ref[0]!r})")


def tokenize(captions: dict[str, list[str]]) -> dict[str, list[str]]:
    """PTB-tokenise (Stanford CoreNLP 3.4.1 in Java, lower-cased, punctuation dropped) as the COCO server does.

    Parameters
    ----------
    captions : image id -> list of raw captions.
    """
    import shutil

    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    if shutil.which("java") is None:
        raise CaptionerError("the PTB tokenizer needs Java (java not on PATH); install a JRE, e.g. "
                             "apt-get install openjdk-17-jre-headless")
    # One caption per line: a newline inside one would shift every later caption onto the wrong image.
    arg = {k: [{"caption": " ".join(str(c).split()) or "."} for c in v] for k, v in captions.items()}
    with contextlib.redirect_stdout(io.StringIO()):
        return PTBTokenizer().tokenize(arg)


def score_captions(preds: dict, refs: dict, spice: str = "auto", meteor: bool = True,
                   tokenized: bool = False) -> dict:
    """Score one predicted caption per image against its references.

    Parameters
    ----------
    preds : image id -> predicted caption (str).
    refs : image id -> list of reference captions; must cover every id in ``preds``.
    spice : "auto" (run when the jars are present, else skip with a note), "off", or "on" (error if absent).
    meteor : METEOR spawns a 2 GB Java process (~10 s); off for quick tests.
    tokenized : the captions are already PTB-tokenised (skip Java; tests).

    Returns
    -------
    dict with BLEU-1..4, METEOR, ROUGE-L (0..1), CIDEr (0..10, pycocoevalcap's scale), CIDEr_x100 (papers'
    scale), SPICE or None, n_images, and notes (list of str, e.g. why SPICE was skipped).
    """
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    _check_inputs(preds, refs)
    ids = list(preds)
    if tokenized:
        gts = {k: list(refs[k]) for k in ids}
        res = {k: [preds[k]] for k in ids}
    else:
        # References and predictions in one Java call (a JVM start costs a second or more).
        both = tokenize({**{("r", k): [r for r in refs[k] if r and r.strip()] for k in ids},
                         **{("p", k): [preds[k]] for k in ids}})
        gts = {k: both[("r", k)] for k in ids}
        res = {k: both[("p", k)] for k in ids}
    out: dict = {"n_images": len(ids), "notes": []}
    with contextlib.redirect_stdout(io.StringIO()):  # Bleu prints its ratio; --json owns stdout
        bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
        for i, b in enumerate(bleu):
            out[f"BLEU-{i + 1}"] = float(b)
        if meteor:
            m = Meteor_()
            try:
                out["METEOR"] = float(m.compute_score(gts, res)[0])
            finally:
                m.close()
        else:
            out["METEOR"] = None
            out["notes"].append("METEOR skipped (meteor=False)")
        out["ROUGE-L"] = float(Rouge().compute_score(gts, res)[0])
        cider, per_image = Cider().compute_score(gts, res)
    out["CIDEr"] = float(cider)
    out["CIDEr_x100"] = float(cider) * 100.0
    out["CIDEr_per_image"] = {k: float(s) for k, s in zip(ids, per_image)}
    if spice == "off":
        out["SPICE"] = None
        out["notes"].append("SPICE skipped (spice=off)")
    elif spice_available():
        from pycocoevalcap.spice.spice import Spice

        with contextlib.redirect_stdout(io.StringIO()):
            out["SPICE"] = float(Spice().compute_score(gts, res)[0])
    elif spice == "on":
        raise CaptionerError(SPICE_NOTE.replace("SPICE skipped", "SPICE asked for, but"))
    else:
        out["SPICE"] = None
        out["notes"].append(SPICE_NOTE)
    return out


def cider_x100(preds: dict, refs: dict) -> float:
    """CIDEr (x100) of PTB-tokenised ``preds`` (id -> caption) against ``refs`` (id -> captions), by
    pycocoevalcap's Cider alone: the same figure as ``score_captions(...)["CIDEr_x100"]`` without BLEU and
    ROUGE-L, which take more than half of its time (the world report scores ~125 caption sets a seed)."""
    from pycocoevalcap.cider.cider import Cider

    _check_inputs(preds, refs)
    score, _ = Cider().compute_score({k: list(refs[k]) for k in preds}, {k: [preds[k]] for k in preds})
    return float(score) * 100.0


class Meteor_:
    """pycocoevalcap's Meteor with an explicit close: its ``__del__`` only runs when the garbage collector
    gets to it, which leaves a 2 GB JVM alive for the rest of a long process."""

    def __init__(self):
        from pycocoevalcap.meteor.meteor import Meteor

        self._m = Meteor()

    def compute_score(self, gts, res):
        return self._m.compute_score(gts, res)

    def close(self):
        p = self._m.meteor_p
        with contextlib.suppress(Exception):
            p.stdin.close()
        with contextlib.suppress(Exception):
            p.kill()
            p.wait(timeout=10)
        # pycocoevalcap's __del__ would try again on a dead pipe; give it a harmless process to close.
        self._m.meteor_p = _DeadProcess()


class _DeadProcess:
    class _Pipe:
        def close(self):
            pass

    stdin = _Pipe()

    def kill(self):
        pass

    def wait(self, timeout=None):
        return 0


# ---------------------------------------------------------------------------------------------------------
# Results files
# ---------------------------------------------------------------------------------------------------------

def coco_image_id(sample_id: str):
    """COCO ids are integers in the results format; other sets keep their string ids."""
    return int(sample_id) if str(sample_id).isdigit() else str(sample_id)


def write_results(path: str | Path, preds: dict) -> Path:
    """Write predictions in the COCO results format ``[{"image_id", "caption"}]`` atomically."""
    rows = [{"image_id": coco_image_id(k), "caption": str(v)} for k, v in preds.items()]
    atomic_write_json(path, rows)
    return Path(path)


def read_results(path: str | Path) -> dict:
    """Read a COCO results file back into ``{str(image_id): caption}``. One-line errors for a file that is not
    JSON, not a list of ``{"image_id", "caption"}``, has a missing or empty caption, or an id twice."""
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise CaptionerError(f"{path}: cannot read COCO results ({e})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "image_id" in r for r in rows):
        raise CaptionerError(f"{path}: not a COCO results file (expected [{{'image_id', 'caption'}}, ...])")
    out = {}
    for i, r in enumerate(rows):
        cap = r.get("caption")
        if not isinstance(cap, str) or not cap.strip():
            raise CaptionerError(f"{path}: entry {i} (image_id {r['image_id']!r}) has "
                                 + ("no caption" if cap is None or "caption" not in r else "an empty caption")
                                 + "; every entry needs a non-empty 'caption' string")
        k = str(r["image_id"])
        if k in out:
            raise CaptionerError(f"{path}: image_id {r['image_id']!r} appears twice (entries give one caption "
                                 "per image)")
        out[k] = cap
    return out


def read_annotations(path: str | Path) -> dict:
    """Reference captions from an official COCO captions file (``{"annotations": [{"image_id", "caption"}],
    ...}``) as ``{str(image_id): [captions]}``."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise CaptionerError(f"{path}: cannot read COCO annotations ({e})") from None
    anns = data.get("annotations") if isinstance(data, dict) else None
    if not isinstance(anns, list) or not all(isinstance(a, dict) and "image_id" in a for a in anns):
        raise CaptionerError(f"{path}: not a COCO captions file (expected {{'annotations': [{{'image_id', "
                             "'caption'}, ...]}, as captions_val2014.json)")
    refs: dict = {}
    for a in anns:
        c = a.get("caption")
        if isinstance(c, str) and c.strip():
            refs.setdefault(str(a["image_id"]), []).append(c)
    if not refs:
        raise CaptionerError(f"{path}: no non-empty reference caption")
    return refs


def score_files(results: str | Path, annotations: str | Path, meteor: bool = True, spice: str = "auto") -> dict:
    """Score a COCO results file against a COCO captions file (any captioner's predictions, the official
    scorer). Every predicted id must have references; annotated images without a prediction are reported."""
    preds, refs = read_results(results), read_annotations(annotations)
    missing = [k for k in preds if k not in refs]
    if missing:
        raise CaptionerError(f"{results}: {len(missing)} image id(s) are not in {annotations} "
                             f"(first: {missing[0]!r}); predictions and annotations must be the same split")
    metrics = score_captions(preds, {k: refs[k] for k in preds}, spice=spice, meteor=meteor)
    metrics.pop("CIDEr_per_image")
    unpredicted = len(set(refs) - set(preds))
    if unpredicted:
        metrics["notes"].append(f"{unpredicted} annotated image(s) have no prediction: scored on the "
                                f"{len(preds)} predicted")
    return {"name": Path(results).name, "results": str(results), "annotations": str(annotations),
            "scale_note": "CIDEr: pycocoevalcap scale (0-10); CIDEr_x100: the papers' scale; others 0-1",
            "metrics": metrics}


# ---------------------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------------------

def format_table(rows: list[dict], title: str | None = None) -> str:
    """A Markdown table of metric rows (each a dict with "name" and the metric keys). BLEU/METEOR/ROUGE-L/
    SPICE are printed x100; CIDEr on both scales, named in the header."""
    head = ["run", "B@1", "B@4", "METEOR", "ROUGE-L", "CIDEr (0-10)", "CIDEr (x100)", "SPICE", "n"]
    lines = []
    if title:
        lines.append(f"**{title}** (BLEU, METEOR, ROUGE-L, SPICE x100; CIDEr on pycocoevalcap's 0-10 scale "
                     "and x100 as in papers)")
        lines.append("")
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" for _ in head) + "|")

    def pct(v):
        return "-" if v is None else f"{100 * v:.1f}"

    for r in rows:
        m = r.get("metrics", r)
        lines.append("| " + " | ".join([
            str(r.get("name", "?")), pct(m.get("BLEU-1")), pct(m.get("BLEU-4")), pct(m.get("METEOR")),
            pct(m.get("ROUGE-L")), "-" if m.get("CIDEr") is None else f"{m['CIDEr']:.3f}",
            "-" if m.get("CIDEr_x100") is None else f"{m['CIDEr_x100']:.1f}", pct(m.get("SPICE")),
            str(m.get("n_images", "")),
        ]) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Running a captioner over an evaluation split
# ---------------------------------------------------------------------------------------------------------

CAPTIONERS = ("retrieval", "decoder")


def references(test_set) -> dict:
    """{sample id: [reference captions]} of a CaptionDataset (empty captions dropped)."""
    return {s.id: [c for c in s.captions if c and c.strip()] for s in test_set.samples}


def predict(pipe, test_set, rotation: str = "paired", captioner: str = "retrieval") -> dict:
    """Caption every image of ``test_set`` through the embedding cache.

    ``rotation="text"`` is the text-only ceiling: each image's query is its first reference caption's own
    text embedding (a perfect rotation), with the same bank and decoder.

    Returns {sample id: caption}.
    """
    from captioner.cache import embed

    if captioner not in CAPTIONERS:
        raise CaptionerError(f"unknown captioner {captioner!r}; choose one of {', '.join(CAPTIONERS)}")
    bank = pipe.bank()
    # The bank must not hold any evaluated caption, or retrieval would be lookup (see captioner.bank).
    bank.assert_excludes(test_set.captions())
    if rotation == "text":
        ts = embed(pipe.encoder("text"), test_set, "text", progress=pipe.progress)
        first: dict = {}
        for r, sid in enumerate(ts.sample_ids):
            first.setdefault(sid, r)
        ids = list(first)
        Q = ts.X[[first[s] for s in ids]]
    else:
        xs = embed(pipe.encoder("image"), test_set, "image", progress=pipe.progress)
        ids = list(xs.sample_ids)
        if not ids:
            raise CaptionerError(f"{test_set.name}/{test_set.split}: no images left after skipping bad files")
        Q = pipe.text_queries(xs.X, rotation)
    out = pipe.caption_queries(Q, top_k=1, decode=captioner == "decoder", rotation=rotation)
    return {sid: o["caption"] for sid, o in zip(ids, out)}


def evaluate(pipe, test_set, rotation: str = "paired", captioner: str = "retrieval", out_dir=None,
             meteor: bool = True, spice: str = "auto", name: str | None = None) -> dict:
    """Predict, score, and (when ``out_dir`` is given) write ``results.json`` (COCO results format),
    ``metrics.json`` and ``config.json`` there, atomically and only once scoring has succeeded.

    Returns {"name", "rotation", "captioner", "dataset", "split", "metrics": {...}, "files": {...}}.
    """
    import time

    t0 = time.time()
    preds = predict(pipe, test_set, rotation, captioner)
    refs = references(test_set)
    metrics = score_captions(preds, {k: refs[k] for k in preds}, spice=spice, meteor=meteor)
    per_image = metrics.pop("CIDEr_per_image")
    name = name or f"{captioner}-{rotation}"
    res = {"name": name, "rotation": rotation, "captioner": captioner, "dataset": test_set.name,
           "split": test_set.split, "n_skipped": len(test_set) - len(preds) + len(test_set.skipped),
           "image_encoder": pipe.image_encoder, "text_encoder": pipe.text_encoder, "bank_size": len(pipe.bank()),
           "scale_note": "CIDEr: pycocoevalcap scale (0-10); CIDEr_x100: the papers' scale; others 0-1",
           "metrics": metrics, "seconds": round(time.time() - t0, 2)}
    examples = sorted(preds, key=lambda k: -per_image[k])
    res["examples"] = [{"image_id": k, "caption": preds[k], "refs": refs[k][:2], "CIDEr": round(per_image[k], 3)}
                       for k in examples[:3] + examples[-2:]]
    if out_dir is not None:
        from pathlib import Path

        out_dir = Path(out_dir)
        write_results(out_dir / "results.json", preds)
        atomic_write_json(out_dir / "metrics.json", {k: v for k, v in res.items() if k != "files"})
        atomic_write_json(out_dir / "config.json", {
            "rotation": rotation, "captioner": captioner, "dataset": test_set.name, "split": test_set.split,
            "image_encoder": pipe.image_encoder, "text_encoder": pipe.text_encoder, "beam": pipe.beam,
            "decode_input": pipe.decode_input_for(rotation), "temperature": pipe.temperature,
            "decoder_preset": pipe.decoder_preset, "meteor": meteor, "spice": spice})
        res["files"] = {"results": str(out_dir / "results.json"), "metrics": str(out_dir / "metrics.json")}
    return res
