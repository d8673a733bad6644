"""The scaling runs' job queue on one machine: a run is trained by the process that claims its pid file
(``claim``); a claim whose process died is stale and taken over."""
from __future__ import annotations

import time
from pathlib import Path


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(path: Path, fresh_s: float = 60.0) -> bool:
    """Take ``path`` (a claim file holding this process's pid) unless a live process holds it.

    Several workers on one machine share a results folder this way: each run (and the image side) is
    trained by the worker that claims it. A claim whose process is gone (killed) is stale and taken
    over; an empty one younger than ``fresh_s`` seconds is a claim being written. True: ours now.
    """
    import os

    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                text, age = path.read_text().strip(), time.time() - path.stat().st_mtime
            except FileNotFoundError:
                continue                      # released meanwhile: try again
            if text.isdigit():
                pid = int(text)
                if pid == os.getpid():
                    return True
                if _alive(pid):
                    return False
            elif age < fresh_s:
                return False
            path.unlink(missing_ok=True)     # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False
