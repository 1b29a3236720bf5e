#!/usr/bin/env python3
"""read_tfevents.py — reads TensorBoard event files from the format's spec,
with nothing from TensorFlow or TensorBoard: each record is

    uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)

(little-endian; masked_crc32c(x) = ((c >> 15 | c << 17) + 0xa282ead8) mod 2^32
with c the CRC-32C, Castagnoli, of x), and data is a tensorflow.Event
protobuf decoded here by hand (wall_time = 1 double, step = 2 int64,
file_version = 3 string, summary = 5 {value = 1 {tag = 1 string,
simple_value = 2 float}}). Both CRCs of every record are checked; any damage,
an unknown wire type or a truncated record is an error (exit 1).

    read_tfevents.py FILE...     prints one JSON line per scalar:
                                 {"file":..., "step":S, "wall_time":W, "tag":T, "value":V}
                                 and {"file":..., "file_version":...} for the first record
"""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = value = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire} of field {field}")
        if i > len(buf):
            raise ValueError("truncated field")
        yield field, wire, v


def read(path):
    data = open(path, "rb").read()
    at, out = 0, []
    while at < len(data):
        if at + 12 > len(data):
            raise ValueError(f"{path}: truncated record header at byte {at}")
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if len_crc != masked(header):
            raise ValueError(f"{path}: bad length CRC at byte {at}")
        body = data[at + 12:at + 12 + length]
        if len(body) != length or at + 16 + length > len(data):
            raise ValueError(f"{path}: truncated record at byte {at}")
        (data_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if data_crc != masked(body):
            raise ValueError(f"{path}: bad data CRC at byte {at}")
        at += 16 + length
        wall, step, version, values = None, 0, None, []
        for field, wire, v in fields(body):
            if field == 1 and wire == 1:
                (wall,) = struct.unpack("<d", v)
            elif field == 2 and wire == 0:
                step = v - (1 << 64) if v >= 1 << 63 else v
            elif field == 3 and wire == 2:
                version = v.decode()
            elif field == 5 and wire == 2:
                for f2, w2, val in fields(v):
                    if f2 != 1 or w2 != 2:
                        continue
                    tag, simple = None, None
                    for f3, w3, x in fields(val):
                        if f3 == 1 and w3 == 2:
                            tag = x.decode()
                        elif f3 == 2 and w3 == 5:
                            (simple,) = struct.unpack("<f", x)
                    values.append((tag, simple))
        if version is not None:
            out.append({"file": path, "file_version": version, "wall_time": wall})
        for tag, simple in values:
            out.append({"file": path, "step": step, "wall_time": wall, "tag": tag, "value": simple})
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        for path in sys.argv[1:]:
            for rec in read(path):
                print(json.dumps(rec))
    except (ValueError, OSError) as e:
        print(f"read_tfevents: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
