#!/usr/bin/env python3
"""Writes corrupted variants of a GGUF model and runs `ferrolm inspect` and `ferrolm generate -n 4`
on each with a timeout, classifying every run as clean error / panic / hang / loads-silently /
warned (generates, with a warning on stderr: for what llama.cpp also accepts).

Usage: corrupt_gguf.py [--bin target/release/ferrolm] [--model PATH] [--timeout 60]
Exit status 1 when any run is bad (panic, hang, or a corrupt model that generates).
"""
import argparse, copy, itertools, math, os, shutil, struct, subprocess, sys, tempfile

# GGUF value types: id -> struct format (scalars); 8 string, 9 array.
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34)}  # F32 F16 Q4_0 Q4_1 Q8_0


class Gguf:
    def __init__(self, data):
        self.pos, self.d = 0, data
        assert self.take(4) == b"GGUF"
        self.version = self.u("I")
        n_t, n_kv = self.u("Q"), self.u("Q")
        self.kv = []
        for _ in range(n_kv):
            k = self.s()
            ty = self.u("I")
            self.kv.append([k, ty, self.val(ty)])
        self.tensors = []
        for _ in range(n_t):
            name = self.s()
            dims = [self.u("Q") for _ in range(self.u("I"))]
            self.tensors.append([name, dims, self.u("I"), self.u("Q")])
        align = self.get("general.alignment") or 32
        start = (self.pos + align - 1) // align * align
        self.blob = data[start:]

    def take(self, n):
        b = self.d[self.pos:self.pos + n]
        self.pos += n
        return b

    def u(self, f):
        return struct.unpack("<" + f, self.take(struct.calcsize(f)))[0]

    def s(self):
        return self.take(self.u("Q")).decode()

    def val(self, ty):
        if ty == 8:
            return self.s()
        if ty == 9:
            et, n = self.u("I"), self.u("Q")
            return (et, [self.val(et) for _ in range(n)])
        return self.u(SCALAR[ty])

    def get(self, k):
        return next((v for kk, _, v in self.kv if kk == k), None)

    def set(self, k, ty, v):
        for e in self.kv:
            if e[0] == k:
                e[1], e[2] = ty, v
                return
        self.kv.append([k, ty, v])

    def encode(self, align_override=None, data_shift=0):
        out = bytearray(b"GGUF" + struct.pack("<IQQ", self.version, len(self.tensors), len(self.kv)))
        def s(x):
            b = x.encode()
            out.extend(struct.pack("<Q", len(b)) + b)
        def v(ty, x):
            if ty == 8:
                s(x)
            elif ty == 9:
                out.extend(struct.pack("<IQ", x[0], len(x[1])))
                for e in x[1]:
                    v(x[0], e)
            else:
                out.extend(struct.pack("<" + SCALAR[ty], x))
        for k, ty, x in self.kv:
            s(k)
            out.extend(struct.pack("<I", ty))
            v(ty, x)
        for name, dims, ty, off in self.tensors:
            s(name)
            out.extend(struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims))
            out.extend(struct.pack("<IQ", ty, off + data_shift))
        align = align_override or self.get("general.alignment") or 32
        out.extend(b"\0" * ((-len(out)) % align))
        return bytes(out) + self.blob


class Lazy(dict):
    """name -> bytes, each built when it is read (one 100 MB variant in memory at a time)."""

    def items(self):
        return ((k, f()) for k, f in super().items())


def variants(src):
    base = Gguf(src)  # parsed once: the tokenizer arrays are large
    arch = base.get("general.architecture")
    K = lambda k: f"{arch}.{k}"

    def fresh():
        g = copy.copy(base)
        g.kv = [list(e) for e in base.kv]
        g.tensors = [[n, list(d), ty, off] for n, d, ty, off in base.tensors]
        return g

    def edit(f):
        def build():
            g = fresh()
            f(g)
            return g.encode()
        return build
    out = Lazy({"control (unmodified)": lambda: src})
    for key, ty, vals in [
        ("block_count", 4, [0xFFFFFFFF, 1, 0, 100]),
        ("embedding_length", 4, [0, 1 << 31]),
        ("feed_forward_length", 4, [0]),
        ("attention.head_count", 4, [0, 7]),
        ("attention.head_count_kv", 4, [0, 5]),
        ("context_length", 10, [0, 1 << 40]),
        ("rope.dimension_count", 4, [1000, 3]),
        ("attention.key_length", 4, [0]),
        ("vocab_size", 4, [1]),
        ("expert_count", 4, [8]),
        ("rope.freq_base", 6, [math.nan, math.inf, -1.0, 0.0]),
        ("attention.layer_norm_rms_epsilon", 6, [math.nan, math.inf, -1.0, 0.0, 10.0]),
        ("rope.scaling.factor", 6, [math.nan, -4.0]),
        ("attention.scale", 6, [math.inf]),
    ]:
        for x in vals:
            out[f"{key} = {x}"] = edit(lambda g, key=key, ty=ty, x=x: g.set(K(key), ty, x))
    for norm in ["blk.0.attn_norm.weight", "output_norm.weight"]:
        for ty, tn in [(2, "Q4_0"), (8, "Q8_0"), (1, "F16")]:
            def retype(g, norm=norm, ty=ty):
                t = next(t for t in g.tensors if t[0] == norm)
                n = t[1][0]
                if n % BLOCK[ty][0] == 0:
                    t[2] = ty
            out[f"{norm} retyped {tn}"] = edit(retype)
    def add_tensor(g, name):
        # 8 F32 values appended after the last tensor, 32-aligned: a well-formed, unused tensor.
        g.blob += b"\0" * ((-len(g.blob)) % 32)
        g.tensors.append([name, [8], 0, len(g.blob)])
        g.blob += b"\0" * 32
    out["extra tensor blk.99.x.weight"] = edit(lambda g: add_tensor(g, "blk.99.x.weight"))
    def realigned():
        # A padding key makes the header end between two multiples of 64, so that padding to 32
        # puts the data where alignment 64 does not (otherwise the file would be valid).
        for n in range(64):
            g = fresh()
            g.set("general.alignment", 4, 64)
            g.set("general.padding", 8, "p" * n)
            header = len(g.encode(align_override=1)) - len(g.blob)
            if 0 < header % 64 <= 32:
                return g.encode(align_override=32)
        raise AssertionError("no padding length works")
    out["general.alignment = 64, data padded to 32"] = realigned
    out["general.alignment = 3"] = edit(lambda g: g.set("general.alignment", 4, 3))
    out["tensor offsets shifted by 4"] = lambda: fresh().encode(data_shift=4)
    out["long metadata key (70000 bytes)"] = edit(lambda g: g.set("k" * 70000, 4, 1))
    out["long tensor name (70000 bytes)"] = edit(lambda g: add_tensor(g, "t" * 70000))
    out["long string value (1 MB)"] = edit(lambda g: g.set("general.name", 8, "x" * 1_000_000))
    for frac in [0.0001, 0.01, 0.5, 0.999]:
        out[f"truncated at {frac:.2%}"] = lambda frac=frac: src[: int(len(src) * frac)]
    return out


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hang", ""
    err = p.stderr.decode(errors="replace")
    if p.returncode == 101 or "panicked" in err or p.returncode < 0:
        return "panic", err.strip().splitlines()[-1:] and err.strip().splitlines()[-1]
    if p.returncode == 0:
        warn = [l for l in err.splitlines() if " WARN " in l or l.startswith("warning")]
        return ("warned", warn[0].strip()) if warn else ("ok", "")
    return "clean error", (err.strip().splitlines() or [""])[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/ferrolm")
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/ferrolm/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    src = open(a.model, "rb").read()
    tmp = tempfile.mkdtemp()
    cases = variants(src)
    fifo = os.path.join(tmp, "fifo.gguf")
    os.mkfifo(fifo)
    counts = {"tried": 0, "clean error": 0, "bad": 0}
    try:
        for i, (name, data) in enumerate(itertools.chain(cases.items(), [("FIFO as the model", None)])):
            path = fifo if data is None else os.path.join(tmp, f"v{i}.gguf")
            if data is not None:
                with open(path, "wb") as f:
                    f.write(data)
            # Well-formed models that only stress `inspect`'s display: generate may run them.
            control = name.startswith(("control", "long metadata key", "long string value"))
            for cmd in (["inspect", "--no-tensors"], ["generate", "-p", "Hi", "-n", "4", "--temp", "0", "-t", "2", "-m"]):
                outcome, msg = run([a.bin, *cmd, path], a.timeout)
                if outcome == "ok":
                    # inspect may summarise a corrupt model; generate must refuse it, or warn
                    # where llama.cpp accepts the file too (bytes after the last tensor).
                    outcome = "ok" if (control or cmd[0] == "inspect") else "loads-silently"
                elif outcome == "warned" and (control or cmd[0] == "inspect"):
                    outcome = "ok"
                bad = outcome in ("panic", "hang", "loads-silently") or (control and outcome != "ok")
                counts["tried"] += 1
                counts["bad" if bad else "clean error"] += outcome == "clean error" or bad
                print(f"{'BAD ' if bad else 'ok  '} {cmd[0]:8} {name[:50]:50} {outcome:14} {msg[:110]}")
            if data is not None:
                os.remove(path)
    finally:
        shutil.rmtree(tmp)
    print(f"\ntried {counts['tried']}, clean error {counts['clean error']}, bad {counts['bad']}, "
          f"accepted {counts['tried'] - counts['clean error'] - counts['bad']} (control runs and inspect summaries)")
    return 1 if counts["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
