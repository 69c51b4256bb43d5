"""Minimal 16-bit PNG writer (gray or RGB) for the loader's test vectors;
Pillow cannot write 16-bit RGB PNGs."""
import struct
import zlib

import numpy as np


def _chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def encode(arr):
    arr = np.asarray(arr, dtype=">u2")
    height, width = arr.shape[:2]
    colour = 2 if arr.ndim == 3 else 0
    raw = b"".join(b"\x00" + arr[y].tobytes() for y in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 16, colour, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr)
            + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b""))
