#!/usr/bin/env python3
"""Splits a GGUF file into shards the way llama.cpp's `gguf-split --split-max-tensors` does:
NAME-00001-of-0000N.gguf holds every metadata key plus split.no / split.count /
split.tensors.count and its share of the tensors; the other shards hold only the split.* keys
and their tensors. Used to build a split model for the Hub tests.

    gguf_split.py MODEL.gguf OUT_DIR PREFIX N_SHARDS
"""
import os
import struct
import sys

SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        size = struct.calcsize("<" + fmt)
        (v,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return v

    def string(self):
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s.decode()

    def skip_value(self, ty):
        if ty == 8:
            self.string()
        elif ty == 9:
            elem, n = self.take("I"), self.take("Q")
            for _ in range(n):
                self.skip_value(elem)
        else:
            self.pos += struct.calcsize("<" + SCALAR[ty])


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def align(n, a):
    return (n + a - 1) // a * a


def main():
    src, out_dir, prefix, n_shards = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    data = open(src, "rb").read()
    r = Reader(data)
    assert data[:4] == b"GGUF", "not a GGUF file"
    r.pos = 4
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    kvs, alignment = [], 32
    for _ in range(n_kv):
        start = r.pos
        key = r.string()
        ty = r.take("I")
        value_pos = r.pos
        r.skip_value(ty)
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", data, value_pos)[0]
        kvs.append(data[start:r.pos])
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.take("I")
        dims = [r.take("Q") for _ in range(n_dims)]
        ty, offset = r.take("I"), r.take("Q")
        tensors.append((name, dims, ty, offset))
    data_start = align(r.pos, alignment)
    ends = sorted(t[3] for t in tensors)[1:] + [len(data) - data_start]
    size_of = {off: end - off for off, end in zip(sorted(t[3] for t in tensors), ends)}

    per = -(-len(tensors) // n_shards)
    os.makedirs(out_dir, exist_ok=True)
    for i in range(n_shards):
        part = tensors[i * per:(i + 1) * per]
        split_kvs = [
            gguf_string("split.no") + struct.pack("<IH", 2, i),
            gguf_string("split.count") + struct.pack("<IH", 2, n_shards),
            gguf_string("split.tensors.count") + struct.pack("<Ii", 5, len(tensors)),
        ]
        own = (kvs if i == 0 else []) + split_kvs
        if i > 0 and alignment != 32:
            own.append(gguf_string("general.alignment") + struct.pack("<II", 4, alignment))
        head = b"GGUF" + struct.pack("<IQQ", version, len(part), len(own)) + b"".join(own)
        body, infos = bytearray(), b""
        for name, dims, ty, offset in part:
            infos += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            infos += struct.pack("<IQ", ty, len(body))
            chunk = data[data_start + offset:data_start + offset + size_of[offset]]
            body += chunk + b"\0" * (align(len(chunk), alignment) - len(chunk))
        header = head + infos
        header += b"\0" * (align(len(header), alignment) - len(header))
        path = os.path.join(out_dir, f"{prefix}-{i + 1:05d}-of-{n_shards:05d}.gguf")
        with open(path, "wb") as f:
            f.write(header + bytes(body))


if __name__ == "__main__":
    main()
