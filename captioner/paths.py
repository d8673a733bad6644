"""Where the project keeps its state: caches, rotations, checkpoints and runs.

Everything lives under ``$CAPTIONER_HOME`` (default ``~/.cache/captioner``) so that tests can point it at
a temporary folder and a user can wipe it in one go.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path


def home() -> Path:
    root = Path(os.environ.get("CAPTIONER_HOME", Path.home() / ".cache" / "captioner"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def subdir(name: str) -> Path:
    p = home() / name
    p.mkdir(parents=True, exist_ok=True)
    return p


def short_hash(obj, n: int = 10) -> str:
    """The first ``n`` hex digits of the SHA-256 of ``obj`` as sorted-key JSON (artifact names)."""
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def slug(s, cap: int = 60) -> str:
    """``s`` as a file-name part: runs of other characters than ``A-Za-z0-9._-`` become ``_``, at most ``cap``
    characters (file names also carry a hash of the full name, so a cut never makes two artifacts collide)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(s)).strip("_")[:cap]


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder and a rename, so that a crash
    never leaves a half-written file under the final name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())
