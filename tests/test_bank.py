"""The broad caption bank's parts, user bank files and their bad inputs."""
import pytest

from captioner.bank import bank_sets, read_bank_file
from captioner.errors import CaptionerError


def test_bank_file_reads_lines_and_refuses_bad_files(tmp_path, monkeypatch):
    p = tmp_path / "b.txt"
    p.write_text("A red car.\n\n  a   dog \nA cat.\n", encoding="utf-8")
    assert read_bank_file(p) == ["A red car.", "a dog", "A cat."]
    assert read_bank_file(p, limit=2) == ["A red car.", "a dog"]
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(CaptionerError, match="no captions"):
        read_bank_file(tmp_path / "empty.txt")
    (tmp_path / "bin.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00 data")
    with pytest.raises(CaptionerError, match="binary data"):
        read_bank_file(tmp_path / "bin.txt")
    (tmp_path / "latin.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(CaptionerError, match="not UTF-8"):
        read_bank_file(tmp_path / "latin.txt")
    with pytest.raises(CaptionerError, match="not found"):
        read_bank_file(tmp_path / "nope.txt")
    import captioner.bank as bank

    monkeypatch.setattr(bank, "MAX_BANK_BYTES", 384 * 4 * 2 * 2)  # room for two captions
    with pytest.raises(CaptionerError, match="--bank-limit"):
        read_bank_file(p)
    assert read_bank_file(p, limit=2) == ["A red car.", "a dog"]


def test_bank_sets_file_and_default_prefix(tmp_path):
    p = tmp_path / "b.txt"
    p.write_text("one\ntwo\nthree\n")
    (ds,) = bank_sets(str(p))
    assert ds.captions() == ["one", "two", "three"]
    parts = bank_sets("default", limit=2500)
    assert [d.name for d in parts][:2] == ["classnames", "tuxpaint"]
    assert sum(len(d.captions()) for d in parts) == 2500  # 2000 class-name captions, the rest a prefix
    assert parts[0].captions()[:2] == ["A tench.", "A photo of a tench."]


def test_default_bank_is_read_from_one_cached_file_until_its_data_changes(tmp_path, monkeypatch):
    """The default bank (limit 2,500) built once, then read back from its file with the same captions and
    embeddings and no encoding; a changed data folder, a damaged file or another exclusion list rebuild it."""
    import numpy as np

    import captioner.bankcache as bc
    from captioner.bank import build_bank
    from captioner.paths import subdir
    from tests.fakes import FakeTextEncoder

    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    monkeypatch.setattr(bc, "data_paths", lambda: [data, tmp_path / "not-installed"])
    enc = FakeTextEncoder(16)
    first = bc.default_bank(enc, limit=2500, exclude=["A tench."], progress=False)
    ref = build_bank(enc, bank_sets("default", limit=2500), exclude=["A tench."], progress=False)
    assert first.texts == ref.texts and np.allclose(first.E, ref.E) and first.dropped == ["A tench."]
    assert "A tench." not in first.texts and len(first) == 2384  # 2,500 less duplicates and the excluded one
    calls = enc.calls
    again = bc.default_bank(enc, limit=2500, exclude=["A tench."], progress=False)
    assert enc.calls == calls  # nothing encoded, nothing merged: one file read
    assert again.texts == first.texts and np.array_equal(again.E, first.E) and again.sources == first.sources
    assert again.dropped == ["A tench."] and again.key() == first.key()
    files = sorted(subdir("corpus").glob("bank-default-*.safetensors"))
    assert len(files) == 1

    (data / "sub" / "new").mkdir()  # a package upgrade adds a file: another key, a rebuilt bank
    bc.default_bank(enc, limit=2500, exclude=["A tench."], progress=False)
    assert len(sorted(subdir("corpus").glob("bank-default-*.safetensors"))) == 2
    other = bc.default_bank(enc, limit=2500, exclude=(), progress=False)
    assert "A tench." in other.texts

    for f in subdir("corpus").glob("bank-default-*.safetensors"):
        f.write_bytes(b"damaged")  # a half-written or damaged file is ignored and rebuilt
    healed = bc.default_bank(enc, limit=2500, exclude=(), progress=False)
    assert healed.texts == other.texts and np.allclose(healed.E, other.E)


def test_fix_articles_mends_cupl_slips_and_leaves_consonant_sounds():
    from captioner.bank import fix_articles

    assert fix_articles("A espresso usually looks like a small cup.") == "An espresso usually looks like a small cup."
    assert fix_articles("a drawing of a American robin.") == "a drawing of an American robin."
    assert fix_articles("An image of a isopod, a ugly one.") == "An image of an isopod, an ugly one."
    for kept in ("a European garden spider", "a unicorn", "a U-shaped bend", "a USB cable", "a one-way street",
                 "a uniform", "an hourglass", "a cat"):
        assert fix_articles(kept) == kept
