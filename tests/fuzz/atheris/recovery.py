"""Harness: a partition's start-up over damaged files (the recovery scan and its truncation).

A template partition is written once with the real ``PartitionLog``: two segments of
idempotent batches, a transaction and its ABORT marker, compressed batches, producer-state
snapshots, as a crash (kill -9) leaves them, and again as a clean shutdown leaves them.  Each
input rewrites the template's files into a scratch directory, damages them, opens the
``PartitionLog`` and checks the outcome against a reference scan of the damaged bytes.

Input: a mode byte, then the damage.  Mode bits: 0, open after a clean shutdown (else after a
crash); 1, give every batch-shaped piece of the damage a correct CRC (so it reaches the checks
after the CRC: offsets, producer-state replay, markers); 2, recover through a 128-byte read
window (so batches straddle windows); 3, write the damage over the active segment from the
position in the next byte, instead of after its end; 4-5: what is damaged: 0-1 the active
segment, 2 the newest producer-state snapshot (replaced by the damage), 3 the active segment's
offset index (replaced).

Properties (after a crash): opening never raises; the active segment is cut exactly where the
reference scan (whole batches, magic 2, CRC, offsets in order) stops, and the bytes before are
unchanged; the older segments are untouched; the log end offset and high watermark are the
reference's; every offset reads back from the batch holding it; an append lands at the log
end; a second start-up finds nothing more to cut.  After a clean shutdown (whose files the
broker trusts without a CRC check, as Kafka does): opening never raises, the file is cut (if at
all) no shorter than the reference's valid prefix, and an append is answered without raising.

    python -m tests.fuzz.atheris.recovery -runs=250000 -seed=1
"""

from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path

from tests.fuzz.atheris.common import fuzz, instrument, scratch_dir

with instrument():
    from crc32c import crc32c

    import onceflow.log.segment as segment_module
    from onceflow.config import BrokerConfig, TopicConfig
    from onceflow.log.partition_log import PartitionLog, ReadResult
    from onceflow.records.batch import HEADER_SIZE, read_header, scan
    from onceflow.records.builder import build_batch

from tests.fuzz.corpus import compressed, quiet_onceflow_logs, sample_batches, with_crc

NOW_MS = 1_700_000_000_000
CONFIG = {"segment.bytes": 700, "index.interval.bytes": 100}
DEFAULT_CHUNK = segment_module._RECOVER_CHUNK
SMALL_CHUNK = 128
#: Appends preallocate 4 MiB (zeroed pages in /dev/shm): most of an input's time, none of its interest.
segment_module.PREALLOCATE_CHUNK = 4096
#: What is appended after start-up.
AFTER = build_batch([(None, b"after")], NOW_MS)


def topic_config() -> TopicConfig:
    return TopicConfig(CONFIG, BrokerConfig())


def open_log(path: Path, clean: bool) -> PartitionLog:
    return PartitionLog("t", 0, path, topic_config(), NOW_MS, clean_shutdown=clean)


def idempotent(i: int) -> bytes:
    return build_batch([(b"k", b"v%d" % i)], NOW_MS + i, producer_id=5, producer_epoch=0, base_sequence=i)


class Template:
    """The files of a partition as a crash left them (``crashed``) and as a clean shutdown did (``clean``)."""

    def __init__(self, root: Path) -> None:
        self.crashed = self._write(root / "crashed", clean=False)
        self.clean = self._write(root / "clean", clean=True)
        names = sorted(n for n in self.crashed if n.endswith(".log"))
        self.active = names[-1]
        self.active_base = int(self.active.split(".")[0])
        probe = open_log(root / "crashed", clean=False)
        self.end_offset = probe.log_end_offset
        probe.close()
        assert self.end_offset == 20, self.end_offset

    @staticmethod
    def _write(path: Path, clean: bool) -> dict[str, bytes]:
        log = open_log(path, clean=True)
        for i in range(12):
            log.append_produced(idempotent(i), NOW_MS)
        log.append_produced(build_batch([(b"t", b"x")], NOW_MS, producer_id=6, producer_epoch=0, base_sequence=0, transactional=True),
                            NOW_MS)
        log.append_marker(6, 0, False, 0, NOW_MS)
        log.append_produced(compressed(build_batch([(b"c", b"z")] * 3, NOW_MS), 4), NOW_MS)
        log.append_produced(build_batch([(None, b"tail")] * 3, NOW_MS + 99), NOW_MS)
        if clean:
            log.flush_all()
        log.close()
        return {p.name: p.read_bytes() for p in path.iterdir()}

    def tail_seeds(self) -> list[bytes]:
        """Batches that could follow the template's last one (stamped with the next offsets)."""
        out = []
        offset = self.end_offset
        for batch in [idempotent(12), *sample_batches(NOW_MS)]:
            out.append(struct.pack(">q", offset) + batch[8:])
            offset += read_header(batch).last_offset_delta + 1
        return out


def fix_crcs(damage: bytes) -> bytes:
    """Every batch-shaped piece of ``damage`` (its own lengths laid end to end) with a correct CRC."""
    out, pos = bytearray(damage), 0
    while pos + HEADER_SIZE <= len(out):
        (length,) = struct.unpack_from(">i", out, pos + 8)
        end = pos + 12 + length
        if length < HEADER_SIZE - 12 or end > len(out):
            break
        out[pos:end] = with_crc(out[pos:end])
        pos = end
    return bytes(out)


def reference_end(data: bytes, base_offset: int) -> tuple[int, int]:
    """(position, next offset) where recovery must cut ``data``: whole batches, magic 2, CRC, offsets
    in order and within the segment's 32-bit range."""
    pos, next_offset = 0, base_offset
    while len(data) - pos >= HEADER_SIZE:
        (first, length, _epoch, magic, crc) = struct.unpack_from(">qiibI", data, pos)
        last_delta = struct.unpack_from(">i", data, pos + 23)[0]
        size = length + 12
        if magic != 2 or length < HEADER_SIZE - 12 or pos + size > len(data) or crc32c(data[pos + 21 : pos + size]) != crc:
            break
        if not next_offset <= first <= first + last_delta <= base_offset + 2**31 - 1:
            break
        next_offset = first + last_delta + 1
        pos += size
    return pos, next_offset


class Scratch:
    def __init__(self) -> None:
        self.root = scratch_dir("onceflow-fuzz-recovery-")
        self.template = Template(self.root / "template")
        self.dir = self.root / "t-0"

    def lay_out(self, files: dict[str, bytes]) -> None:
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir()
        for name, content in files.items():
            (self.dir / name).write_bytes(content)

    def finish(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


_SCRATCH: Scratch | None = None


def one_input(data: bytes) -> None:
    assert _SCRATCH is not None
    if not data:
        return
    mode, damage = data[0], data[1:]
    clean = bool(mode & 1)
    template = _SCRATCH.template
    files = dict(template.clean if clean else template.crashed)
    active = template.active
    original = files[active]
    target = (mode >> 4) & 3
    if mode & 2:
        damage = fix_crcs(damage)
    if target <= 1:
        if mode & 8 and damage:
            at = damage[0] * len(original) // 256
            damage = damage[1:]
            files[active] = original[:at] + damage + original[at + len(damage) :]
        else:
            files[active] = original + damage
    elif target == 2:
        snapshots = sorted(n for n in files if n.endswith(".snapshot"))
        files[snapshots[-1]] = damage
    else:
        files[active.replace(".log", ".index")] = damage
    _SCRATCH.lay_out(files)
    segment_module._RECOVER_CHUNK = SMALL_CHUNK if mode & 4 else DEFAULT_CHUNK
    damaged = files[active]
    log = open_log(_SCRATCH.dir, clean)
    try:
        for name, content in files.items():  # older segments untouched
            if name.endswith(".log") and name != active:
                assert (_SCRATCH.dir / name).read_bytes() == content, f"{name} changed"
        kept = (_SCRATCH.dir / active).read_bytes()
        cut, next_offset = reference_end(damaged, template.active_base)
        if not clean:
            assert kept == damaged[:cut], f"recovery kept {len(kept)} bytes, the reference scan {cut}"
            assert log.log_end_offset == next_offset and log.high_watermark == next_offset, \
                (log.log_end_offset, log.high_watermark, next_offset)
            check_reads(log)
        else:  # the files are trusted (no CRC check), or found corrupt and recovered: never less than the valid prefix
            assert len(kept) >= cut and kept == damaged[: len(kept)], f"kept {len(kept)} bytes, the valid prefix is {cut}"
        appended = log.append_produced(AFTER, NOW_MS)
        if not clean:
            assert not hasattr(appended, "error"), appended
            assert appended.base_offset == next_offset  # type: ignore[union-attr]
    finally:
        log.close()
    if not clean:  # a second start-up (after a crash) keeps everything the first one kept, and the append
        again = open_log(_SCRATCH.dir, clean=False)
        try:
            assert again.log_end_offset == next_offset + 1, (again.log_end_offset, next_offset)
        finally:
            again.close()


def check_reads(log: PartitionLog) -> None:
    """Offsets below the log end (each batch's first, and the one after its last) read from the
    first batch that reaches them."""
    batches = [h for s in log.segments for _, h in scan(s.read(0, s.size))]
    offsets = {log.log_start_offset} | {o for h in batches for o in (h.base_offset, h.last_offset + 1)}
    for offset in sorted(o for o in offsets if log.log_start_offset <= o < log.log_end_offset):
        got = log.read(offset, 1)
        assert isinstance(got, ReadResult)
        first = next(scan(got.records), None)
        expected = next((h for h in batches if h.last_offset >= offset), None)
        assert first is not None and expected is not None and first[1].base_offset == expected.base_offset, (offset, first, expected)


def seeds(template: Template) -> list[bytes]:
    tails = template.tail_seeds()
    out = []
    for mode in (0x00, 0x02, 0x04, 0x01):
        out += [bytes([mode]) + tail for tail in tails]
    out.append(b"\x00" + b"".join(tails))
    out.append(b"\x02" + tails[0][:40])  # a torn header
    out.append(b"\x08" + b"\x80" + tails[1])  # over the middle of the segment
    out.append(b"\x20" + template.crashed[sorted(n for n in template.crashed if n.endswith(".snapshot"))[-1]])
    out.append(b"\x31" + template.clean[template.active.replace(".log", ".index")])
    return out


def main() -> None:
    global _SCRATCH
    errors = quiet_onceflow_logs()
    _SCRATCH = Scratch()

    def no_errors() -> None:
        assert not errors.records, "\n".join(errors.records)

    def one(data: bytes) -> None:
        one_input(data)
        no_errors()

    fuzz(one, seeds(_SCRATCH.template), max_len=2048, check=no_errors, finish=_SCRATCH.finish)


if __name__ == "__main__":
    sys.exit(main())
