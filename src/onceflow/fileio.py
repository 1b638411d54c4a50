"""Durable small-file writes: replace a file atomically, fsync a directory.

A file that must never be seen half-written (topic metadata, producer-id
reservations, producer-state snapshots, cleaner and log start checkpoints) is
written to a temporary name, fsynced, renamed over the old one, and the
directory is fsynced so the rename itself survives a power cut.  A crash
leaves either the old file or the new one, plus perhaps a stray temporary
file that its owner deletes at start-up.
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


def atomic_write(path: Path, data: bytes | str, tmp_suffix: str = ".tmp", mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``.  A new file gets ``mode`` (0o600 for secrets; less what the
    umask removes) from its creation; a temporary file left by a crash keeps its own (its owner
    deletes it at start-up)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(path.name + tmp_suffix)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


#: The version line of Kafka's offset checkpoint files.
_CHECKPOINT_VERSION = 0


def write_partition_checkpoint(path: Path, topic: str, partition: int, offset: int) -> None:
    """Atomically replace a one-partition offset checkpoint (``atomic_write``).

    Format, Kafka's offset checkpoint files (``cleaner-offset-checkpoint``,
    ``log-start-offset-checkpoint``) holding a single partition: a version
    line (0), a count line (1), then ``<topic> <partition> <offset>``.
    """
    atomic_write(path, f"{_CHECKPOINT_VERSION}\n1\n{topic} {partition} {offset}\n")


def read_partition_checkpoint(path: Path) -> int | None:
    """The offset in a one-partition checkpoint, or None if there is no file.

    Raises ValueError (or OSError) when the file cannot be read or is not in
    the format ``write_partition_checkpoint`` writes.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    lines = text.split("\n")
    try:
        if int(lines[0]) != _CHECKPOINT_VERSION or int(lines[1]) != 1:
            raise ValueError(f"version {lines[0]}, {lines[1]} entries")
        return int(lines[2].rsplit(" ", 1)[1])
    except IndexError as exc:
        raise ValueError(f"truncated: {text!r}") from exc
