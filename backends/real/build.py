"""Building the native programs with gcc, installing a freshly built binary
without ever exposing a partial one."""
from __future__ import annotations

import os
import shutil
import subprocess
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


def compile_c(source: Path, out: Path, cflags: list[str], error: type[Exception],
              what: str, hint: str = "", deps: tuple[Path, ...] = (),
              force: bool = False) -> Path:
    """``gcc cflags -o out source`` unless ``out`` is newer than the source and
    its ``deps`` (headers); installed atomically.  Failures raise ``error``:
    that ``what`` needs gcc (then ``hint``), or the compiler's message."""
    newest = max(p.stat().st_mtime for p in (source, *deps))
    if not force and out.exists() and out.stat().st_mtime >= newest:
        return out
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if cc is None:
        raise error(f"gcc is needed to build {what} {source} (Debian: apt-get install gcc)"
                    + hint)
    with atomic_binary(out) as tmp:
        r = subprocess.run([cc, *cflags, "-o", tmp, str(source)], capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0:
            raise error(f"building {source} failed:\n{r.stderr.strip()}")
    return out
