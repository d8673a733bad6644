import json

import numpy as np
import pytest
from PIL import Image

from captioner.cache import embed, load_embeddings, paired
from captioner.datasets import CaptionDataset, Sample
from captioner.errors import CacheMismatchError, CaptionerError
from tests.fakes import FakeImageEncoder, FakeTextEncoder


def _dataset(tmp_path, n=6, bad=()):
    samples = []
    for i in range(n):
        p = tmp_path / f"im{i}.png"
        if i in bad:
            p.write_bytes(b"not a png")
        else:
            Image.new("RGB", (10, 10), (40 * i % 255, 10, 200)).save(p)
        samples.append(Sample(id=f"s{i}", source=str(p), captions=[f"caption {i}", f"other {i}"]))
    return CaptionDataset("toy", "test", samples)


def test_image_cache_roundtrip_reuse_and_skips(tmp_path):
    ds = _dataset(tmp_path, bad={2})
    enc = FakeImageEncoder()
    es = embed(enc, ds, batch_size=4, progress=False)
    assert es.X.shape == (5, 15) and es.ids == ["s0", "s1", "s3", "s4", "s5"]
    assert es.meta["n_skipped"] == 1 and "im2.png" in es.meta["skipped"][0][1]
    direct = enc.encode([Image.open(ds.samples[i].source).convert("RGB") for i in (0, 1, 3, 4, 5)])
    np.testing.assert_allclose(es.X, direct, atol=1e-6)
    calls = enc.calls
    again = embed(enc, ds, progress=False)
    assert enc.calls == calls  # reused, not recomputed
    np.testing.assert_array_equal(again.X, es.X)
    assert not list(es.path.parent.glob(".*partial"))  # no partial shards left behind
    side = json.loads(es.path.with_suffix(".json").read_text())
    assert side["encoder"]["name"] == "fake-image" and side["N"] == 5 and side["D"] == 15


def test_text_cache_rows_and_pairing(tmp_path):
    ds = _dataset(tmp_path)
    ts = embed(FakeTextEncoder(8), ds, progress=False)
    assert ts.X.shape == (12, 8) and ts.ids[:2] == ["s0#0", "s0#1"] and ts.texts[1] == "other 0"
    ims = embed(FakeImageEncoder(), ds, progress=False)
    X, Y, sids = paired(ims, ts, reduce="first")
    assert X.shape == (6, 15) and Y.shape == (6, 8) and sids == [f"s{i}" for i in range(6)]
    np.testing.assert_allclose(Y[3], FakeTextEncoder(8).encode(["caption 3"])[0], atol=1e-6)
    _, Ym, _ = paired(ims, ts, reduce="mean")
    np.testing.assert_allclose(Ym[0], ts.X[:2].mean(0), atol=1e-6)


def test_refuses_cache_of_another_encoder(tmp_path):
    ds = _dataset(tmp_path)
    out = tmp_path / "mine.safetensors"
    embed(FakeTextEncoder(8), ds, out=out, progress=False)
    with pytest.raises(CacheMismatchError, match="fake-text"):
        embed(FakeTextEncoder(16), ds, out=out, progress=False)
    with pytest.raises(CacheMismatchError, match="written by encoder"):
        load_embeddings(out, expect={"encoder": FakeImageEncoder().fingerprint()})
    assert embed(FakeTextEncoder(16), ds, out=out, force=True, progress=False).X.shape == (12, 16)


def test_resumes_from_partial_shards(tmp_path, monkeypatch):
    from captioner import cache

    monkeypatch.setattr(cache, "CHUNK", 4)
    ds = _dataset(tmp_path, n=10)
    enc = FakeTextEncoder(8)

    class Boom(Exception):
        pass

    real = enc._encode
    seen = {"n": 0}

    def flaky(batch):
        seen["n"] += 1
        if seen["n"] == 3:
            raise Boom()
        return real(batch)

    monkeypatch.setattr(enc, "_encode", flaky)
    with pytest.raises(Boom):
        embed(enc, ds, batch_size=4, progress=False)
    partial = list((tmp_path / "captioner-home" / "embeddings").glob(".*partial"))
    assert len(partial) == 1 and len(list(partial[0].glob("*.npz"))) == 2  # two chunks survived the crash
    assert not list((tmp_path / "captioner-home" / "embeddings").glob("*.json"))  # nothing final written
    es = embed(enc, ds, batch_size=4, progress=False)
    assert seen["n"] == 6  # 3 calls before the crash, then one for each of the 3 missing chunks
    np.testing.assert_allclose(es.X, FakeTextEncoder(8).encode([t for s in ds.samples for t in s.captions]),
                               atol=1e-6)


def test_all_images_bad_writes_nothing(tmp_path):
    ds = _dataset(tmp_path, n=2, bad={0, 1})
    with pytest.raises(CaptionerError, match="every image failed"):
        embed(FakeImageEncoder(), ds, progress=False)
    assert not list((tmp_path / "captioner-home" / "embeddings").glob("*.safetensors"))
