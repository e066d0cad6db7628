"""Installing a freshly built binary without ever exposing a partial one."""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_binary(out: Path) -> Iterator[str]:
    """Yield a temp path next to ``out`` for the compiler to write; on a clean
    exit make it executable and rename it over ``out``.  A concurrent run may
    be executing ``out``, so it is only ever replaced whole; a failed build
    (the body raising) leaves ``out`` untouched and removes the temp file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}-", dir=out.parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
