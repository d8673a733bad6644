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
    assert "A tench." not in first.texts and len(first) == 2409  # 2,500 less duplicates and the excluded one
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


def test_article_follows_the_sound_so_class_name_captions_read_right():
    from captioner.bank import classname_captions
    from captioner.photocaption import name_caption
    from captioner.subject import article

    assert [article(n) for n in ("espresso", "Egyptian Mau", "European polecat", "unicycle",
                                 "one-piece bathing suit", "umbrella", "USB flash drive", "cat")] == [
        "an", "an", "a", "a", "a", "an", "a", "a"]
    assert name_caption("unicycle") == "A photo of a unicycle."
    assert name_caption("orange") == "A photo of an orange."
    caps = set(classname_captions("imagenet1k"))
    assert {"A European polecat.", "A photo of a unicycle.", "An espresso."} <= caps
    assert not any(c.startswith(("An European", "A photo of an European", "An unicycle")) for c in caps)


def test_clean_titles_drop_serials_tags_and_licence_text_but_keep_counts_and_models():
    from captioner.bank import clean_title, clean_titles

    assert [clean_title(t) for t in ("church building 01", "horse#2", "Bus1", "mailbox 3", "recycling_box_3d",
                                     "glace_2_bw", "Habanero Pepper 1, Simple")] == [
        "church building", "horse", "Bus", "mailbox", "recycling box", "glace", "Habanero Pepper, Simple"]
    for kept in ("2 dead frogs", "45 rpm record", "Boeing 747", "Ice Cream Cone (1 Scoop)", "Tiger"):
        assert clean_title(kept) == kept
    assert clean_title("This work is hereby released into the Public Domain.") is None
    assert clean_title("_3_") is None
    assert clean_titles(["paper 2", "paper 3", "Paper", "see http://x.org", "Tiger"]) == ["paper", "Tiger"]
