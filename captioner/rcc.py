"""A reader of Qt resource files (``.rcc``), enough to take GCompris' photos and board files out of them.

The format, as Qt documents it in ``rcc.cpp`` (``RCCResourceLibrary::writeHeader`` and ``writeDataStructure``):
a header ``b"qres"``, then big-endian uint32 version, tree offset, data offset, names offset (and a uint32 of
flags from version 3 on). The tree is an array of fixed-size nodes (14 bytes; 22 from version 2 on, which add
a uint64 modification time): uint32 name offset, uint16 flags (1 = zlib-compressed, 2 = directory,
4 = zstd-compressed), then for a directory uint32 child count and uint32 index of its first child, for a file
uint16 territory, uint16 language and uint32 data offset. A name is uint16 length, uint32 hash, then the name
in UTF-16BE; a data entry is uint32 size then the bytes (zlib entries start with a uint32 of the
uncompressed size). Node 0 is the root directory.
"""
from __future__ import annotations

import struct
import zlib
from functools import lru_cache
from pathlib import Path

from captioner.errors import CaptionerError

_ZLIB, _DIR, _ZSTD = 1, 2, 4


def _unpack(fmt: str, buf: bytes, off: int, path) -> tuple:
    try:
        return struct.unpack_from(fmt, buf, off)
    except struct.error:
        raise CaptionerError(f"{path}: truncated Qt resource file (offset {off})") from None


def read_rcc(path) -> dict[str, bytes]:
    """All files of a Qt resource file: {"gcompris/src/.../x.webp": bytes}. Raises CaptionerError on a file
    that is not one (wrong magic, offsets out of range) or on zstd entries without the ``zstandard`` module."""
    path = Path(path)
    try:
        buf = path.read_bytes()
    except OSError as e:
        raise CaptionerError(f"{path}: cannot read ({e.strerror})") from None
    if buf[:4] != b"qres":
        raise CaptionerError(f"{path}: not a Qt resource file (no 'qres' header)")
    version, tree, data, names = _unpack(">4I", buf, 4, path)
    if version not in (1, 2, 3):
        raise CaptionerError(f"{path}: Qt resource format version {version} is not supported (1-3 are)")
    node = 14 if version == 1 else 22
    out: dict[str, bytes] = {}

    def name_at(off: int) -> str:
        (n,) = _unpack(">H", buf, names + off, path)
        raw = buf[names + off + 6: names + off + 6 + 2 * n]
        if len(raw) != 2 * n:
            raise CaptionerError(f"{path}: truncated name table")
        return raw.decode("utf-16-be")

    stack = [(0, "")]
    seen = 0
    while stack:
        i, prefix = stack.pop()
        seen += 1
        if seen > 10_000_000:
            raise CaptionerError(f"{path}: the resource tree loops")
        o = tree + i * node
        name_off, flags = _unpack(">IH", buf, o, path)
        name = name_at(name_off) if i else ""
        if flags & _DIR:
            count, first = _unpack(">II", buf, o + 6, path)
            sub = f"{prefix}{name}/" if i else ""
            stack += [(first + j, sub) for j in range(count)]
            continue
        (doff,) = _unpack(">I", buf, o + 10, path)
        (size,) = _unpack(">I", buf, data + doff, path)
        raw = buf[data + doff + 4: data + doff + 4 + size]
        if len(raw) != size:
            raise CaptionerError(f"{path}: truncated data for {prefix}{name}")
        if flags & _ZLIB:
            raw = zlib.decompress(raw[4:])
        elif flags & _ZSTD:
            try:
                import zstandard
            except ImportError:
                raise CaptionerError(f"{path}: {prefix}{name} is zstd-compressed; pip install zstandard") from None
            raw = zstandard.ZstdDecompressor().decompress(raw)
        out[prefix + name] = raw
    return out


@lru_cache(maxsize=8)
def rcc_files(path: str) -> dict[str, bytes]:
    """``read_rcc`` cached per file (GCompris' photo files are a few MB each)."""
    return read_rcc(path)
