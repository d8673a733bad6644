"""Hostile inputs for the reliability tests and bench/reliability_probe.py: a PNG decompression bomb written
row by row (never held in memory), and seeded mutations of dataset JSON."""
from __future__ import annotations

import copy
import random
import struct
import zlib
from pathlib import Path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bomb(path, width: int = 20000, height: int = 20000, rgba: bool = True) -> Path:
    """An all-zero 8-bit RGBA (or RGB) PNG of ``width`` x ``height``: 20000 x 20000 RGBA is ~1.5 MB on disk
    and 1.6 GB decoded. Every row (filter byte + pixels) is zeros, so the zlib stream is one compressed block
    of many rows, made once and repeated (a full flush makes each copy independent of the one before)."""
    bands = 4 if rgba else 3
    row = 1 + width * bands
    per_block = max(1, min(height, (8 << 20) // row))
    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = raw.compress(bytes(row * per_block)) + raw.flush(zlib.Z_FULL_FLUSH)
    n_full, rest = divmod(height, per_block)
    tail = raw.compress(bytes(row * rest)) + raw.flush() if rest else raw.flush()
    adler = ((row * height) % 65521) << 16 | 1  # Adler-32 of n zero bytes: a stays 1, b = n mod 65521
    stream = b"\x78\xda" + block * n_full + tail + struct.pack(">I", adler & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6 if rgba else 2, 0, 0, 0)
    path = Path(path)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", stream) + _chunk(b"IEND", b""))
    return path


_ODD_VALUES = [None, "", "a cat", 0, -1, 3.5, True, [], {}, ["x"], {"raw": None}, "../../etc/passwd",
               "\x00", "é" * 3, 10**20, [None], [{"raw": 5}], {"id": "1"}]


def mutate(obj, rng: random.Random):
    """A copy of the JSON value ``obj`` with one random change: a value replaced by an odd one, a key
    deleted, a list emptied or a string given where a list was."""
    out = copy.deepcopy(obj)
    paths = []

    def walk(x, trail):
        paths.append(trail)
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, trail + [k])
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, trail + [i])

    walk(out, [])
    trail = rng.choice(paths[1:] or paths)
    if not trail:
        return rng.choice(_ODD_VALUES)
    parent = out
    for k in trail[:-1]:
        parent = parent[k]
    key = trail[-1]
    op = rng.random()
    if op < 0.2 and isinstance(parent, dict):
        del parent[key]
    elif op < 0.3 and isinstance(parent[key], list):
        parent[key] = []
    else:
        parent[key] = rng.choice(_ODD_VALUES)
    return out
