"""Artifacts shared between processes: one builder per key, and damaged files moved aside.

``key_lock(path)`` is an exclusive lock per artifact (``flock`` on a hidden ``.<name>.lock`` next to it):
a second process that wants the same cache, rotation or checkpoint waits for the first and then finds its
result instead of building it again. The holder removes the lock file before it lets go, and a waiter
that locked a file no longer under that name starts over, so no lock file outlives its builder.

``quarantine(path, reason)`` renames a file that failed to load to ``<name>.damaged-<time>`` (never
deletes it) and says so in one line, so that the next step rebuilds it.
"""
from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("captioner")


def lock_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.parent / f".{path.name}.lock"


@contextmanager
def key_lock(path: str | os.PathLike, what: str | None = None):
    """Hold the lock of artifact ``path`` (a file that may not exist yet) for the ``with`` block.

    Blocks while another process (or thread) holds it, after one line saying who waits for what. Not
    re-entrant: do not take the lock of one path twice in one thread. Without ``fcntl`` (Windows) it
    does nothing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not Linux/macOS
        yield
        return
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    said = False
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not said:
                    log.warning("waiting for another process building %s", what or Path(path).name)
                    said = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(lock).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)  # the holder removed that lock file as it finished: lock the current one
    try:
        yield
    finally:
        try:
            os.unlink(lock)
        except FileNotFoundError:
            pass
        os.close(fd)


def quarantine(path: str | os.PathLike, reason: str, *companions) -> Path | None:
    """Move ``path`` (and each existing file in ``companions``, e.g. its JSON sidecar) aside as
    ``<name>.damaged-<YYYYmmdd-HHMMSS>-<pid>`` and log one line naming it and ``reason``.

    Returns the new name of ``path`` (None if it was already gone)."""
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    moved = None
    for i, p in enumerate((path, *companions)):
        p = Path(p)
        dest, n = p.with_name(f"{p.name}.damaged-{stamp}"), 1
        while dest.exists():  # moved aside twice within a second: keep both
            n += 1
            dest = p.with_name(f"{p.name}.damaged-{stamp}-{n}")
        try:
            os.replace(p, dest)
        except FileNotFoundError:
            continue
        if i == 0:
            moved = dest
    log.warning("%s: %s; moved aside to %s and rebuilding it", path, reason,
                (moved or Path(path)).name)
    return moved
