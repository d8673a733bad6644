"""`captioner caption`, `classify`, `eval coco`, `eval zeroshot` and `python -m eval report` end to end through click's
CliRunner, on fake encoders (deterministic, no weights) over the embedded Tux Paint splits."""
import json
import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from captioner.cli import cli, main
from tests.fakes import install_fake_encoders

HAS_TUX = os.path.isdir("/usr/share/tuxpaint/stamps")
HAS_JAVA = shutil.which("java") is not None
pytestmark = pytest.mark.skipif(not HAS_TUX, reason="tuxpaint-stamps-default not installed")
FAKE = ["--image-encoder", "fake-image", "--text-encoder", "fake-text", "-q"]


@pytest.fixture(scope="module")
def module_home(tmp_path_factory):
    return tmp_path_factory.mktemp("cli-home")


@pytest.fixture(autouse=True)
def fakes(monkeypatch, captioner_home, module_home):
    # One state folder for the module: the fake embeddings and fitted maps are built once, not per test.
    monkeypatch.setenv("CAPTIONER_HOME", str(module_home))
    made = install_fake_encoders(monkeypatch)
    from captioner import pipeline

    monkeypatch.setattr(pipeline, "_DEFAULTS", {})  # a fresh Pipeline per test: artifacts come from disk
    return made


@pytest.fixture
def images(tmp_path):
    paths = []
    for i, colour in enumerate([(200, 30, 30), (30, 200, 30)]):
        a = np.random.default_rng(i).integers(0, 60, (48, 48, 3)) + np.array(colour)
        p = tmp_path / f"im{i}.png"
        Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(p)
        paths.append(str(p))
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    return paths, str(bad)


def invoke(*args, code=0):
    res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res


def test_caption_json(images):
    from captioner.datasets import get_dataset

    paths, bad = images
    res = invoke("caption", *paths, bad, "--top-k", "3", "--no-decode", "--json", *FAKE, code=3)  # 3: skipped
    data = json.loads(res.stdout)
    assert data["rotation"] == "paired" and len(data["results"]) == 2 and len(data["skipped"]) == 1
    assert data["captioner"] == "retrieval" and data["bank"] == "train"  # fake encoders have no classifier head
    train = set(get_dataset("tuxpaint", split="train").captions())
    for r in data["results"]:
        assert r["image"] in paths and len(r["retrieved"]) == 3
        assert r["caption"] == r["retrieved"][0]["caption"] and r["caption"] in train
    assert res.stderr.count("broken.png") == 1 and "warning: skipped" in res.stderr  # said once


def test_missing_user_file_is_not_called_a_dataset_root_problem(images):
    paths, _ = images
    res = invoke("caption", paths[0], "/no/such/photo.jpg", "--no-decode", "-k", "1", *FAKE, code=3)
    assert "photo.jpg: file not found; check the path" in res.stderr and "dataset root" not in res.stderr
    assert res.stdout.startswith(paths[0])


def test_classify_label_forms_and_label_sets(images):
    paths, _ = images
    spaced = json.loads(invoke("classify", paths[0], "--labels", "cat", "dog", "car", "--json", *FAKE).stdout)
    comma = json.loads(invoke("classify", paths[0], "--labels", "cat,dog,car", "--json", *FAKE).stdout)
    assert spaced["n_classes"] == comma["n_classes"] == 3 and len(spaced["results"]) == 1
    assert spaced["results"][0]["labels"] == comma["results"][0]["labels"]
    cifar = json.loads(invoke("classify", paths[0], "--label-set", "cifar10", "-k", "10", "--json", *FAKE).stdout)
    assert cifar["n_classes"] == 10 and {x["label"] for x in cifar["results"][0]["labels"]} >= {"airplane", "truck"}
    res = CliRunner().invoke(cli, ["classify", paths[0], "--labels=", *FAKE])
    assert res.exit_code == 2 and "--labels is empty" in res.output
    res = CliRunner().invoke(cli, ["classify", paths[0], "--label-set", "nosuch", *FAKE])
    assert res.exit_code != 0 and "tuxpaint, imagenet100, cifar10" in str(res.exception or res.output)
    assert "tuxpaint, imagenet100, cifar10" in " ".join(invoke("classify", "--help").stdout.split())


def test_caption_text_output_and_pairfree(images):
    paths, _ = images
    res = invoke("caption", paths[0], "--rotation", "pairfree", "-k", "2", "--no-decode", *FAKE)
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith(paths[0] + ": ") and len(lines) == 3 and lines[1].lstrip().startswith("1.")


def test_classify_labels_and_label_set(images):
    paths, _ = images
    data = json.loads(invoke("classify", paths[0], "--labels", "cat,fire truck,frog", "--json", *FAKE).stdout)
    assert data["n_classes"] == 3 and len(data["results"][0]["labels"]) == 3
    assert {x["label"] for x in data["results"][0]["labels"]} == {"cat", "fire truck", "frog"}
    data = json.loads(invoke("classify", paths[0], "--label-set", "tuxpaint", "-k", "5", "--json", *FAKE).stdout)
    assert data["n_classes"] == 15 and len(data["results"][0]["labels"]) == 5
    assert data["results"][0]["labels"][0]["label"] in {"animals", "vehicles", "food", "town", "plants", "people",
                                                        "clothes", "hobbies", "household", "medical", "military",
                                                        "naturalforces", "seasonal", "space", "sports"}


@pytest.mark.parametrize("args, msg", [
    (["classify", "{img}", "--labels", "cat,Cat"], "error: duplicate label 'Cat'"),
    (["classify", "{img}", "--labels", "cat"], "error: zero-shot classification needs at least two classes"),
    (["caption", "{bad}", "--no-decode"], "error: no images left: all 1 file(s) were skipped"),
])
def test_bad_input_is_one_line(images, capsys, args, msg):
    paths, bad = images
    args = [a.format(img=paths[0], bad=bad) for a in args]
    with pytest.raises(SystemExit) as e:
        main(args + FAKE)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(msg) and not any("Traceback" in line for line in err)


@pytest.mark.skipif(not HAS_JAVA, reason="java not installed (PTB tokenizer)")
def test_eval_coco_writes_coco_results_and_both_cider_scales(tmp_path):
    from captioner.datasets import get_dataset

    out = tmp_path / "run"
    res = invoke("eval", "coco", "--no-meteor", "--json", "--out", str(out), *FAKE)
    data = json.loads(res.stdout)
    m = data["metrics"]
    test = get_dataset("tuxpaint", split="test")
    assert m["n_images"] == len(test) and data["bank_size"] > 300
    assert m["CIDEr_x100"] == pytest.approx(100 * m["CIDEr"]) and 0 <= m["CIDEr"] <= 10
    assert m["SPICE"] is None or isinstance(m["SPICE"], float)
    rows = json.loads((out / "results.json").read_text())
    assert len(rows) == len(test) and all(set(r) == {"image_id", "caption"} for r in rows)
    assert {r["image_id"] for r in rows} == {s.id for s in test.samples}
    bank_texts = set(get_dataset("tuxpaint", split="train").captions())
    assert all(r["caption"] in bank_texts for r in rows)  # retrieval: bank captions only, never test ones
    assert json.loads((out / "metrics.json").read_text())["metrics"]["CIDEr"] == m["CIDEr"]


def test_eval_zeroshot_json(tmp_path):
    data = json.loads(invoke("eval", "zeroshot", "--mode", "paired", "--json", "--out", str(tmp_path / "z.json"),
                             *FAKE).stdout)
    assert data["n_classes"] == 15 and 0 <= data["top1"] <= data["top5"] <= 1
    assert data["chance_top1"] == pytest.approx(1 / 15)
    assert json.loads((tmp_path / "z.json").read_text())["top1"] == data["top1"]
    data = json.loads(invoke("eval", "zeroshot", "--mode", "cluster", "--json", *FAKE).stdout)
    assert sorted(data["perm"]) == list(range(15)) and data["pairing"].startswith("none")


def test_eval_coco_missing_root_is_an_error(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["eval", "coco", "--coco-root", str(tmp_path / "nowhere"), *FAKE])
    assert e.value.code == 2 and "no such folder" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not HAS_JAVA, reason="java not installed (PTB tokenizer)")
def test_report_writes_markdown_and_json(tmp_path):
    from eval.cli import cli as eval_cli  # the report is an experiment: python -m eval report

    res = CliRunner().invoke(eval_cli, ["report", "--no-meteor", "--decoder-preset", "tiny", "--out", str(tmp_path),
                                        "--rotations", "paired,text", "--zeroshot-modes", "paired,cluster", *FAKE],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "| retrieval | paired Procrustes" in res.stdout and "CIDEr (x100)" in res.stdout
    data = json.loads((tmp_path / "report.json").read_text())
    # 2 captioners x 2 rotations + the decoder fed the reference embedding directly
    assert [(r["captioner"], r["rotation"]) for r in data["captioning"]] == [
        ("retrieval", "paired"), ("retrieval", "text"), ("decoder", "paired"), ("decoder", "text"),
        ("decoder-direct", "text")]
    assert [z["mode"] for z in data["zeroshot"]] == ["paired", "cluster"]
    for r in data["captioning"]:
        assert (tmp_path / "runs" / r["name"] / "results.json").exists()
    assert (tmp_path / "report.md").read_text().startswith("## Results on tuxpaint/test")


@pytest.mark.skipif(not HAS_JAVA, reason="java not installed (PTB tokenizer)")
def test_eval_coco_on_a_karpathy_format_folder(tmp_path):
    """The --coco-root path on a miniature dataset_coco.json: integer image ids, several references each,
    the bank built from the train split only."""
    words = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black", "pink", "brown"]
    things = ["cat", "dog", "bus", "boat"]
    images, rng = [], np.random.default_rng(0)
    (tmp_path / "val2014").mkdir()
    for i in range(40):
        w, t = words[i % 10], things[i // 10]
        name = f"COCO_val2014_{i:012d}.jpg"
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(tmp_path / "val2014" / name)
        images.append({"filepath": "val2014", "filename": name, "cocoid": 1000 + i,
                       "split": "test" if i % 4 == 0 else ("restval" if i % 4 == 1 else "train"),
                       "sentences": [{"raw": f"A {w} {t} on the street."}, {"raw": f"The {t} is {w}."}]})
    (tmp_path / "dataset_coco.json").write_text(json.dumps({"images": images}))
    out = tmp_path / "run"
    data = json.loads(invoke("eval", "coco", "--coco-root", str(tmp_path), "--no-meteor", "--json", "--out",
                             str(out), *FAKE).stdout)
    assert data["dataset"] == "coco" and data["split"] == "test" and data["metrics"]["n_images"] == 10
    assert data["bank_size"] == 60  # 30 train + restval images x 2 captions, all distinct
    rows = json.loads((out / "results.json").read_text())
    assert sorted(r["image_id"] for r in rows) == [1000 + i for i in range(0, 40, 4)]
    test_caps = {s["raw"] for im in images if im["split"] == "test" for s in im["sentences"]}
    assert not {r["caption"] for r in rows} & test_caps


def test_eval_zeroshot_imagenet100_folders(tmp_path, capsys):
    from captioner.datasets import imagenet100_classes

    classes = imagenet100_classes()
    assert len(classes) == 100 and classes[0] == ("n02869837", "poke bonnet")
    rng = np.random.default_rng(0)
    for wnid, _ in classes[:2]:
        (tmp_path / "val" / wnid).mkdir(parents=True)
        for j in range(3):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(tmp_path / "val" / wnid / f"{j}.png")
    data = json.loads(invoke("eval", "zeroshot", "-d", "imagenet100", "--root", str(tmp_path), "--prompts", "both",
                             "--json", *FAKE).stdout)
    assert data["n_classes"] == 100 and data["n_images"] == 6 and data["prompts"] == "both"
    with pytest.raises(SystemExit):
        main(["eval", "zeroshot", "-d", "imagenet100", "--root", str(tmp_path), "--mode", "cluster", *FAKE])
    assert "needs at least as many images (6) as classes (100)" in capsys.readouterr().err


def test_named_label_sets_have_unique_labels():
    from captioner.commands.caption import named_label_set

    labels, prompts = named_label_set("imagenet1k")
    assert len(labels) == 1000 and len({x.lower() for x in labels}) == 1000
    # the two "missile" classes keep their plain name in the prompts; the label tells them apart
    assert prompts.count("missile") == 2 and "missile (n04008634)" in labels
    labels, prompts = named_label_set("tuxpaint")
    assert "naturalforces" in labels and prompts[labels.index("naturalforces")] == "natural force"


def test_the_classifier_captioner_uses_lite1_unless_an_image_encoder_is_named(images, fakes, monkeypatch):
    """No --image-encoder: the classifier captioner runs on EfficientNet-Lite1 (best on the validation
    photos), the rotations and classify on Lite0; a named encoder is always used."""
    import captioner.encoders.heads as heads
    import captioner.photocaption as pc

    paths, _ = images
    fakes["efficientnet-lite0"] = fakes["efficientnet-lite1"] = fakes["fake-image"]
    monkeypatch.setattr(heads, "has_classifier_head", lambda enc: True)
    seen = []

    def fake_captions(pipe, ims, top_k=5):
        seen.append(pipe.image_encoder)
        return [{"caption": "A photo of a thing.", "retrieved": []} for _ in ims]
    monkeypatch.setattr(pc, "classifier_captions", fake_captions)
    assert invoke("caption", paths[0], "--text-encoder", "fake-text", "-q").stdout.endswith("a thing.\n")
    invoke("caption", paths[0], "--image-encoder", "efficientnet-lite0", "--text-encoder", "fake-text", "-q")
    assert seen == ["efficientnet-lite1", "efficientnet-lite0"]
    monkeypatch.setattr(pc, "classifier_captions", lambda pipe, ims, top_k=5: [
        {"caption": "A photo of a thing.", "class_prob": 0.1073, "retrieved": []} for _ in ims])
    out = invoke("caption", paths[0], "--text-encoder", "fake-text", "-q").stdout
    assert out.endswith(": A photo of a thing.  (class probability 0.11)\n")  # how sure the head is, in the text
    from captioner import pipeline

    monkeypatch.setattr(pipeline, "_DEFAULTS", {})
    invoke("caption", paths[0], "--rotation", "paired", "--no-decode", "--text-encoder", "fake-text", "-q")
    assert [json.loads(k)["image_encoder"] for k in pipeline._DEFAULTS] == ["efficientnet-lite0"]


def test_classify_defaults_to_the_head_rotation_only_with_a_classifier_head(images, fakes, monkeypatch):
    """No --rotation: classify uses ``head`` (no image-caption pair) when the image encoder has a classifier
    head, ``paired`` when it has none or a map file is given; --rotation always wins."""
    import captioner.encoders.heads as heads
    from captioner.commands.caption import _default_classify_rotation

    paths, _ = images
    data = json.loads(invoke("classify", paths[0], "--labels", "cat,dog", "--json", *FAKE).stdout)
    assert data["rotation"] == "paired"  # the fake image encoder has no head
    monkeypatch.setattr(heads, "has_classifier_head", lambda enc: True)
    assert _default_classify_rotation("fake-image", "cpu", None) == "head"
    assert _default_classify_rotation("fake-image", "cpu", "map.safetensors") == "paired"
    data = json.loads(invoke("classify", paths[0], "--labels", "cat,dog", "-r", "pairfree", "--json", *FAKE).stdout)
    assert data["rotation"] == "pairfree"
