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
