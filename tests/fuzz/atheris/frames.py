"""Harness: the frame decoder and request parser (``FrameReader`` + ``parse_request``).

Input: two control bytes, then the byte stream a connection would receive.  The first control
byte picks the read size (1..64 bytes or all at once) and whether bytes arrive the way the
socket delivers them (``get_buffer``/``buffer_updated``) or through ``receive_data``; the
second picks ``max_frame_bytes`` (64 B .. 16 KiB).

Properties: the reader yields exactly the frames a reference splitter cuts from the stream
(contents included, across buffer growth, shrinking and sliding), then NEED_DATA or
``FrameTooLarge`` where the reference says; each frame parses into a ``Request`` or an
``UnknownApiVersions``, or raises ``ProtocolError``; nothing else is ever raised.

    python -m tests.fuzz.atheris.frames -runs=250000 -seed=1
"""

from __future__ import annotations

import struct
import sys
import uuid

from tests.fuzz.atheris.common import fuzz, instrument

with instrument():
    from onceflow.protocol import apis
    from onceflow.protocol.errors import FrameTooLarge, ProtocolError
    from onceflow.protocol.framing import NEED_DATA, FrameReader, Request, UnknownApiVersions, _body_reader, parse_request

from tests.fuzz.corpus import corpus, every_request

for _key, (_low, _high) in apis.SUPPORTED.items():  # every decoder up front (kio's schema classes, uninstrumented)
    for _version in range(_low, _high + 1):
        _body_reader(_key, _version)


def reference_split(stream: bytes, max_frame: int) -> tuple[list[bytes], bool]:
    """(frames, whether the stream then has a size prefix the reader must refuse)."""
    frames, pos = [], 0
    while pos + 4 <= len(stream):
        (size,) = struct.unpack_from(">i", stream, pos)
        if size < 0 or size > max_frame:
            return frames, True
        if pos + 4 + size > len(stream):
            break
        frames.append(stream[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return frames, False


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    mode, size_code, stream = data[0], data[1], data[2:]
    chunk = (mode & 0x3F) + 1 if mode & 0x40 else len(stream) or 1
    socket_path = bool(mode & 0x80)
    max_frame = 64 << (size_code % 9)  # 64 B .. 16 KiB
    reader = FrameReader(max_frame)
    got: list[bytes] = []
    refused = False
    try:
        for i in range(0, len(stream), chunk):
            piece = stream[i : i + chunk]
            while piece:
                if socket_path:
                    buf = reader.get_buffer(-1)
                    n = min(len(buf), len(piece))
                    assert n > 0, "get_buffer returned no room"
                    buf[:n] = piece[:n]
                    reader.buffer_updated(n)
                    piece = piece[n:]
                else:
                    reader.receive_data(piece)
                    piece = b""
                while (frame := reader.next_frame()) is not NEED_DATA:
                    assert isinstance(frame, memoryview)
                    got.append(bytes(frame))
                    try:
                        request = parse_request(frame)
                    except ProtocolError:
                        continue
                    assert isinstance(request, (Request, UnknownApiVersions)), type(request)
    except FrameTooLarge:
        refused = True
    expected, too_large = reference_split(stream, max_frame)
    assert got == expected, f"frames differ: got {len(got)}, expected {len(expected)}"
    assert refused == too_large, f"FrameTooLarge raised={refused}, expected={too_large}"


def seeds() -> list[bytes]:
    frames = corpus(uuid.UUID(int=1)) + every_request(uuid.UUID(int=1))
    out = [bytes([0x00, 8]) + f for f in frames]  # whole, max 16 KiB
    out += [bytes([0xC0 | 6, 8]) + frames[i] + frames[i + 1] for i in range(0, len(frames) - 1, 7)]  # 7-byte socket reads
    out += [bytes([0x40, 0]) + frames[0]]  # byte by byte, 64-byte limit
    return out


def main() -> None:
    fuzz(one_input, seeds(), max_len=4096)


if __name__ == "__main__":
    sys.exit(main())
