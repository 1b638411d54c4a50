"""Durable small-file writes: replace a file atomically, fsync a directory.

A file that must never be seen half-written (topic metadata, producer-id
reservations, producer-state snapshots, cleaner checkpoints) is written to a
temporary name, fsynced, renamed over the old one, and the directory is
fsynced so the rename itself survives a power cut.  A crash leaves either
the old file or the new one, plus perhaps a stray temporary file that its
owner deletes at start-up.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | str, tmp_suffix: str = ".tmp") -> None:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(path.name + tmp_suffix)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
