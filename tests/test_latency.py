"""Warm-call latency pieces: thread settings, the decoder-corpus cache, the onnx decoder and text encoder."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from captioner.errors import CaptionerError
from captioner.threads import resolve
from tests.fakes import FakeTextEncoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_thread_settings_resolve():
    s = resolve("auto", cores=2, load=0.2)
    assert (s.threads, s.spinning) == (2, False)
    assert resolve("auto", cores=2, load=1.2).threads == 1  # one idle core left
    assert resolve("auto", cores=2, load=9.0).threads == 1  # never below one
    assert resolve("auto", cores=16, load=3.6).threads == 12
    assert resolve("3", cores=2).threads == 3
    t = resolve("torch", cores=2)
    assert (t.threads, t.spinning) == (None, True)
    with pytest.raises(CaptionerError, match="CAPTIONER_THREADS"):
        resolve("many")
    with pytest.raises(CaptionerError):
        resolve("0")


def test_thread_setting_is_applied_to_torch_and_onnxruntime():
    code = ("from captioner.threads import configure, ort_options; s = configure(); import torch, json; "
            "so = ort_options(); print(json.dumps([s.threads, torch.get_num_threads(), so.intra_op_num_threads, "
            "so.inter_op_num_threads, so.get_session_config_entry('session.intra_op.allow_spinning'), "
            "__import__('os').environ.get('OMP_WAIT_POLICY')]))")
    env = {**os.environ, "CAPTIONER_THREADS": "1"}
    env.pop("OMP_NUM_THREADS", None)
    env.pop("OMP_WAIT_POLICY", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [1, 1, 1, 1, "0", "PASSIVE"]
    n = min(2, os.cpu_count() or 1)
    env["CAPTIONER_THREADS"] = str(n)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)[:3] == [n, n, n]


def _corpus(enc, monkeypatch, texts, exclude=()):
    """decoder_corpus on the class-name source only, with its captions replaced by ``texts``."""
    import captioner.bank as bank

    monkeypatch.setattr(bank, "classname_captions", lambda label_set="imagenet1k": list(texts))
    return bank.decoder_corpus(enc, exclude=exclude, extra=("imagenet",), n_cupl=0, progress=False)


def test_decoder_corpus_cache_reused_and_invalidated(monkeypatch, captioner_home):
    import captioner.bank as bank

    enc = FakeTextEncoder(dim=8)
    texts = ["A koala.", "A photo of a koala.", "A tram.", "A photo of a tram."]
    t1, E1, s1 = _corpus(enc, monkeypatch, texts)
    assert t1 == texts and E1.shape == (4, 8) and s1 == [{"name": "classnames/imagenet1k", "n": 4}]
    files = sorted(p.name for p in (captioner_home / "corpus").iterdir())
    assert len(files) == 2  # the embeddings and their sidecar

    built = []
    real = bank.build_bank
    monkeypatch.setattr(bank, "build_bank", lambda *a, **k: built.append(1) or real(*a, **k))
    t2, E2, s2 = _corpus(enc, monkeypatch, texts)
    assert built == [] and t2 == t1 and s2 == s1 and np.array_equal(E2, E1)  # reused: nothing rebuilt

    t3, _, _ = _corpus(enc, monkeypatch, texts + ["A yak."])  # a changed source
    assert built == [1] and t3[-1] == "A yak."
    t4, E4, _ = _corpus(enc, monkeypatch, texts, exclude=["a tram"])  # a changed exclude list
    assert built == [1, 1] and t4 == ["A koala.", "A photo of a koala.", "A photo of a tram."]
    assert np.allclose(E4, E1[[0, 1, 3]])
    t5, _, _ = _corpus(FakeTextEncoder(dim=6), monkeypatch, texts)  # another encoder
    assert built == [1, 1, 1] and len(t5) == 4
    assert len(list((captioner_home / "corpus").iterdir())) == 8


def test_onnx_decoder_decodes_as_torch(tmp_path):
    pytest.importorskip("onnxruntime")
    from captioner.decoder import preset
    from captioner.decoder_onnx import export_decoder, load_onnx_decoder
    from captioner.decoder_train import train_decoder

    texts = ["a red apple", "a blue car", "a small dog", "a green tree", "a yellow bus", "a black cat"] * 3
    E = np.stack([FakeTextEncoder(dim=16).encode([t])[0] for t in texts])
    fp = FakeTextEncoder(dim=16).fingerprint()
    path = tmp_path / "dec.pt"
    mcfg, tcfg = preset("tiny", steps=60)
    dec = train_decoder(texts, E, fp, path, mcfg, tcfg, progress=False)
    assert load_onnx_decoder(path, fp) is None  # not exported yet
    export_decoder(dec, path)
    fast = load_onnx_decoder(path, fp)
    assert fast is not None
    Q = E[:6] + 0.05 * np.random.default_rng(0).standard_normal(E[:6].shape).astype(np.float32)
    assert fast.generate(Q) == dec.generate(Q)
    path.write_bytes(path.read_bytes() + b"\0")  # another checkpoint under the same name: not served
    assert load_onnx_decoder(path, fp) is None


@pytest.mark.slow
def test_onnx_text_encoder_agrees_with_torch(shared_home, monkeypatch):
    pytest.importorskip("onnxruntime")
    from captioner.encoders.text_onnx import MiniLML6, fast_tokenizer

    monkeypatch.setenv("CAPTIONER_HOME", str(shared_home))
    sents = ["A koala sleeping in a eucalyptus tree.", "Two children fly a kite on a windy beach!",
             "pluto — until recently, it was considered the 9th planet in our solar system.",
             "An astronaut in a white space suit with an American flag.", "grinning face with smiling eyes",
             "A photo of a fire truck.", " ".join(["word"] * 200)]  # the last one is truncated at 128 tokens
    fast = MiniLML6(backend="onnx")
    slow = MiniLML6(backend="torch")
    assert fast.fingerprint() == slow.fingerprint()
    ref = slow.encode(sents)
    got = fast.encode(sents)
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 1 - 1e-5, cos
    tok = fast_tokenizer(fast.path)
    hf = slow.torch_encoder().tokenizer(sents, padding=True, truncation=True, max_length=128)
    assert [e.ids for e in tok.encode_batch(sents)] == hf["input_ids"]
