"""Ship random-weight .tflite models without their weights, and put random weights back on the device.

``zero``   MODEL.tflite OUT.tflite.gz  - cut every float weight buffer of at least ``--min-bytes`` out of
           the file and gzip the rest (the "skeleton"); OUT.tflite.gz.json lists the holes
           ``[offset, nbytes, dtype]`` in the ORIGINAL file's coordinates.
``refill`` IN.tflite.gz OUT.tflite     - stream the skeleton back, filling each hole with seeded
           N(0, std) values of its dtype, so OUT has the original layout byte for byte outside the holes.

Why holes rather than zeroed bytes: deflate cannot compress better than ~1000:1, so a zeroed 3.4 GB UNet
still costs ~3.4 MB per model; cutting the regions out costs nothing, and the transfer budget is 64 MiB.
Both directions stream (mmap in, chunked writes out), so a 3.4 GB model never sits in process memory.

The weights are random either way (the models come from ``--random-weights`` conversions): timings do not
depend on the values, and parity compares two runtimes on the same refilled file. Small float buffers
(biases, norm scales: below ``--min-bytes``) and every non-float buffer (shapes, indices) ship as they are.
Refill draws from a pool of 16 Mi seeded N(0, std) samples, each chunk read from a random offset of it:
every buffer has the right distribution but buffers are not independent of each other - irrelevant for
timing and parity, and it writes a 3.4 GB UNet at disk speed instead of spending ~20 s in the RNG.

Usage: ``python3 -m bench.weights zero unet.tflite .h200/models/unet_b1.tflite.gz``
       ``python3 -m bench.weights refill .h200/models/unet_b1.tflite.gz /tmp/unet_b1.tflite``
Needs numpy, and ai_edge_litert (flatbuffer schema) for ``zero`` only.
"""
from __future__ import annotations

import argparse
import gzip
import json
import mmap
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FORMAT = "sdconvert-h200-holes"
VERSION = 1
_FLOAT_TYPES = {0: "f4", 1: "f2"}  # TensorType FLOAT32, FLOAT16
CHUNK = 64 << 20
POOL = 16 << 20  # values in the refill pool (64 MiB of fp32)
REFILL_METHOD = "pool-v1"  # changes whenever refill() would write other values for the same seed


@dataclass(frozen=True)
class Hole:
    offset: int
    nbytes: int
    dtype: str  # numpy kind+size: "f4" / "f2"


def find_holes(buf: mmap.mmap | bytes, min_bytes: int) -> list[Hole]:
    """Float weight buffers of at least ``min_bytes``, inline (``Buffer.data``) or appended (offset/size)."""
    from ai_edge_litert import schema_py_generated as S

    model = S.Model.GetRootAs(buf, 0)
    types: dict[int, int] = {}
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        for t in range(sg.TensorsLength()):
            tensor = sg.Tensors(t)
            types.setdefault(tensor.Buffer(), tensor.Type())
    holes = []
    for b in range(model.BuffersLength()):
        dtype = _FLOAT_TYPES.get(types.get(b, -1))
        if dtype is None:
            continue
        buffer = model.Buffers(b)
        field = buffer._tab.Offset(4)  # vtable slot of Buffer.data (no public accessor for its position)
        if field and buffer.DataLength() > 0:
            start, n = buffer._tab.Vector(field), buffer.DataLength()
        elif buffer.Offset() > 1:
            start, n = int(buffer.Offset()), int(buffer.Size())
        else:
            continue
        if n >= min_bytes and n % int(dtype[1]) == 0:
            holes.append(Hole(int(start), int(n), dtype))
    holes.sort(key=lambda h: h.offset)
    for a, b in zip(holes, holes[1:]):
        if a.offset + a.nbytes > b.offset:
            raise SystemExit(f"overlapping weight buffers at {a.offset} and {b.offset}: not a valid model")
    return holes


def zero(src: Path, dst: Path, min_bytes: int = 16384, level: int = 6) -> dict:
    """Write the skeleton ``dst`` (gzip) and ``dst``.json; returns the json document."""
    with open(src, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        if len(mm) < 8 or bytes(mm[4:8]) != b"TFL3":
            raise SystemExit(f"{src} is not a .tflite model")
        holes = find_holes(mm, min_bytes)
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".part")
        with gzip.open(tmp, "wb", compresslevel=level) as out:
            pos = 0
            for h in [*holes, Hole(len(mm), 0, "f4")]:
                for start in range(pos, h.offset, CHUNK):
                    out.write(mm[start:min(start + CHUNK, h.offset)])
                pos = h.offset + h.nbytes
        size = len(mm)
    doc = {"format": FORMAT, "version": VERSION, "source": src.name, "bytes": size,
           "hole_bytes": sum(h.nbytes for h in holes), "min_bytes": min_bytes,
           "holes": [[h.offset, h.nbytes, h.dtype] for h in holes]}
    Path(str(dst) + ".json").write_text(json.dumps(doc) + "\n")
    os.replace(tmp, dst)
    return doc


def _read_exact(stream, n: int, out) -> None:
    while n > 0:
        block = stream.read(min(n, CHUNK))
        if not block:
            raise SystemExit("skeleton is shorter than its holes json says (truncated .gz?)")
        out.write(block)
        n -= len(block)


def refill(src: Path, dst: Path, seed: int = 0, std: float = 0.02) -> int:
    """Rebuild ``dst`` from the skeleton ``src`` and ``src``.json; returns the number of bytes written."""
    doc = json.loads(Path(str(src) + ".json").read_text())
    if doc.get("format") != FORMAT:
        raise SystemExit(f"{src}.json is not a {FORMAT} file")
    rng = np.random.default_rng(seed)
    pool = rng.standard_normal(POOL, dtype=np.float32) * np.float32(std)
    pools = {"f4": np.concatenate([pool, pool]).astype("<f4")}  # doubled: any offset has POOL values after it
    pools["f2"] = pools["f4"].astype("<f2")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".part")
    pos = 0
    with gzip.open(src, "rb") as skel, open(tmp, "wb") as out:
        for offset, nbytes, dtype in doc["holes"]:
            _read_exact(skel, offset - pos, out)
            left = nbytes // int(dtype[1])
            while left:
                k = min(left, POOL)
                start = int(rng.integers(POOL))
                out.write(pools[dtype][start:start + k].tobytes())
                left -= k
            pos = offset + nbytes
        _read_exact(skel, doc["bytes"] - pos, out)
        if skel.read(1):
            raise SystemExit("skeleton is longer than its holes json says (mismatched files?)")
    os.replace(tmp, dst)
    return int(doc["bytes"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    z = sub.add_parser("zero", help="cut the float weights out of a .tflite, gzip the rest")
    z.add_argument("src", type=Path)
    z.add_argument("dst", type=Path)
    z.add_argument("--min-bytes", type=int, default=16384, help="smallest float buffer to cut (default 16384)")
    r = sub.add_parser("refill", help="rebuild a .tflite with random weights")
    r.add_argument("src", type=Path)
    r.add_argument("dst", type=Path)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--std", type=float, default=0.02)
    args = ap.parse_args(argv)
    if args.cmd == "zero":
        doc = zero(args.src, args.dst, args.min_bytes)
        print(f"{args.dst}: {len(doc['holes'])} holes, {doc['hole_bytes'] / 2**20:.1f} of {doc['bytes'] / 2**20:.1f} "
              f"MiB cut, skeleton {args.dst.stat().st_size / 2**20:.2f} MiB gz")
    else:
        n = refill(args.src, args.dst, args.seed, args.std)
        print(f"{args.dst}: {n / 2**20:.1f} MiB (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
