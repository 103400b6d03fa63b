"""Localise a GPU backend's parity failure on a real model: run every distinct (op, shapes, options) node of a
.tflite graph as a one-node model on the given delegate backends and on the CPU interpreter, and report the
relative error of each (worst first).

The graph is read lazily (mmap + flatbuffers), so a 3.4 GB SD1.5 UNet costs no RAM; a model refilled from a
``.h200/models/<name>.sparse.gz`` pack can be a sparse file (``--sparse``: weights are holes, nothing is
written for them). Constant inputs are copied when their bytes are real (shape/axes/permutation tensors,
small float constants) and drawn N(0, 0.02) when they are weights; variable inputs are N(0, 1)::

    python3 scripts/gl_op_sweep.py --sparse .h200/models/vae_decoder.sparse.gz --lib build/gl/libsdgpu_delegate.so \
        --backends gl,opencl --out /tmp/sweep.json

``--max-bytes`` skips nodes whose largest tensor is bigger (llvmpipe binds at most 128 MB per storage buffer).
"""
from __future__ import annotations

import argparse
import gzip
import json
import mmap
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from ai_edge_litert import schema_py_generated as S

NP_TYPES = {S.TensorType.FLOAT32: np.float32, S.TensorType.INT32: np.int32, S.TensorType.INT64: np.int64,
            S.TensorType.FLOAT16: np.float16, S.TensorType.BOOL: np.bool_}
OP_NAMES = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}


def sparse_file(pack: Path, dst: Path) -> list[tuple[int, int]]:
    """Write the stored bytes of a sparse pack at their offsets (weights stay holes); returns the weight regions."""
    meta = json.loads(Path(str(pack) + ".json").read_text())
    packed = gzip.open(pack).read()
    with open(dst, "wb") as f:
        pos = q = 0
        for start, n, _ in meta["regions"]:
            f.seek(pos)
            f.write(packed[q:q + start - pos])
            q += start - pos
            pos = start + n
        f.seek(pos)
        f.write(packed[q:])
        f.truncate(meta["size"])
    return [(start, start + n) for start, n, _ in meta["regions"]]


class Graph:
    def __init__(self, path: Path, regions: list[tuple[int, int]]):
        self._f = open(path, "rb")
        self.mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
        self.model = S.Model.GetRootAs(self.mm, 0)
        self.sub = self.model.Subgraphs(0)
        self.regions = regions

    def const_bytes(self, tensor: int) -> tuple[bytes | None, bool]:
        """(bytes, real) of a constant tensor; (None, False) for a variable one. real=False: weight hole."""
        t = self.sub.Tensors(tensor)
        buf = self.model.Buffers(t.Buffer())
        if buf.Offset() > 1:  # data outside the flatbuffer (models > 2 GB)
            lo, hi = buf.Offset(), buf.Offset() + buf.Size()
        else:
            field = buf._tab.Offset(4)  # Buffer.data (flatbuffers vtable slot 0)
            if field == 0 or buf._tab.VectorLen(field) == 0:
                return None, False
            lo = buf._tab.Vector(field)
            hi = lo + buf._tab.VectorLen(field)
        real = not any(lo < r1 and r0 < hi for r0, r1 in self.regions)
        return bytes(self.mm[lo:hi]), real


def one_node_model(g: Graph, index: int, rng: np.random.Generator) -> tuple[bytes, dict[str, np.ndarray], str, int]:
    """(model, inputs, op name, largest tensor bytes) for node `index` alone."""
    op = g.sub.Operators(index)
    code = g.model.OperatorCodes(op.OpcodeIndex())
    opt = S.OperatorT.InitFromObj(op)
    code_t = S.OperatorCodeT.InitFromObj(code)
    tensors, buffers, inputs, feeds = [], [S.BufferT()], [], {}
    largest = 0

    def add(src: int, const: bytes | None) -> int:
        nonlocal largest
        t = g.sub.Tensors(src)
        tt = S.TensorT()
        tt.name = f"t{len(tensors)}"
        tt.shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
        tt.type = t.Type()
        tt.buffer = 0
        if const is not None:
            b = S.BufferT()
            b.data = np.frombuffer(const, np.uint8)
            buffers.append(b)
            tt.buffer = len(buffers) - 1
        largest = max(largest, int(np.prod(tt.shape or [1])) * np.dtype(NP_TYPES.get(tt.type, np.float32)).itemsize)
        tensors.append(tt)
        return len(tensors) - 1

    new_inputs = []
    for src in op.InputsAsNumpy():
        if src < 0:
            new_inputs.append(-1)
            continue
        data, real = g.const_bytes(int(src))
        t = g.sub.Tensors(int(src))
        dtype = NP_TYPES.get(t.Type(), np.float32)
        shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
        if data is not None and not real:  # a weight: synthesise
            data = (rng.standard_normal(shape) * 0.02).astype(dtype).tobytes()
        k = add(int(src), data)
        if data is None:
            name = tensors[k].name
            feeds[name] = (rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating)
                           else rng.integers(0, 8, shape).astype(dtype))
            inputs.append(k)
        new_inputs.append(k)
    outputs = [add(int(o), None) for o in op.OutputsAsNumpy()]
    opt.opcodeIndex = 0
    opt.inputs, opt.outputs = new_inputs, outputs
    sub = S.SubGraphT()
    sub.tensors, sub.inputs, sub.outputs, sub.operators = tensors, inputs, outputs, [opt]
    sig = S.SignatureDefT()
    sig.signatureKey, sig.subgraphIndex = "serving_default", 0

    def tmap(i: int):
        m = S.TensorMapT()
        m.name, m.tensorIndex = tensors[i].name, i
        return m

    sig.inputs, sig.outputs = [tmap(i) for i in inputs], [tmap(i) for i in outputs]
    model = S.ModelT()
    model.version, model.operatorCodes, model.subgraphs, model.buffers = 3, [code_t], [sub], buffers
    model.signatureDefs = [sig]
    import flatbuffers

    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    name = OP_NAMES.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "CUSTOM")
    return bytes(b.Output()), feeds, name, largest


def node_key(g: Graph, index: int) -> str:
    """Op, input shapes and builtin options: nodes with equal keys compute the same function."""
    op = g.sub.Operators(index)
    shapes = [tuple(int(d) for d in g.sub.Tensors(int(t)).ShapeAsNumpy()) if t >= 0 else None
              for t in op.InputsAsNumpy()]
    code = g.model.OperatorCodes(op.OpcodeIndex())
    options = S.OperatorT.InitFromObj(op).builtinOptions
    return f"{max(code.BuiltinCode(), code.DeprecatedBuiltinCode())}|{shapes}|{vars(options) if options else ''}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a .tflite file")
    src.add_argument("--sparse", help="a .sparse.gz pack (its .json beside it)")
    ap.add_argument("--lib", required=True)
    ap.add_argument("--backends", default="gl")
    ap.add_argument("--max-bytes", type=float, default=0, help="skip nodes with a bigger tensor (0 = no limit)")
    ap.add_argument("--ops", default="", help="comma-separated op names to test (default all)")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    from ai_edge_litert.interpreter import Interpreter, load_delegate

    if args.sparse:
        path = Path("/tmp") / (Path(args.sparse).name.replace(".sparse.gz", "") + "_sweep.tflite")
        regions = sparse_file(Path(args.sparse), path)
    else:
        path, regions = Path(args.model), []
    g = Graph(path, regions)
    seen: dict[str, int] = {}
    for i in range(g.sub.OperatorsLength()):
        seen.setdefault(node_key(g, i), i)
    wanted = set(args.ops.split(",")) if args.ops else None
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for key, index in seen.items():
        model, feeds, name, largest = one_node_model(g, index, rng)
        if wanted and name not in wanted:
            continue
        row: dict[str, Any] = {"node": index, "op": name, "shapes": key.split("|")[1], "bytes": largest}
        if args.max_bytes and largest > args.max_bytes:
            row["skipped"] = "too big"
            rows.append(row)
            continue
        try:
            ref = Interpreter(model_content=model).get_signature_runner("serving_default")(**feeds)
        except Exception as e:  # noqa: BLE001 - the reference may lack a kernel for an odd node
            row["skipped"] = f"cpu: {e}"[:200]
            rows.append(row)
            continue
        want = next(iter(ref.values())).astype(np.float64)
        for be in args.backends.split(","):
            try:
                d = load_delegate(args.lib, {"backend": be})
                got = Interpreter(model_content=model, experimental_delegates=[d]).get_signature_runner(
                    "serving_default")(**feeds)
                y = next(iter(got.values())).astype(np.float64)
                row[be] = float(np.linalg.norm(y - want) / max(np.linalg.norm(want), 1e-30))
                row[be + "_max_abs"] = float(np.abs(y - want).max())
            except Exception as e:  # noqa: BLE001
                row[be] = f"error: {e}"[:200]
        rows.append(row)
        print(json.dumps(row), flush=True)
    def worst(r: dict[str, Any]) -> float:
        vals = [r[b] for b in args.backends.split(",") if isinstance(r.get(b), float)]
        return max(vals) if vals else -1.0
    rows.sort(key=worst, reverse=True)
    print(f"{len(rows)} distinct nodes in {time.perf_counter() - t_start:.0f} s; worst:")
    for r in rows[:15]:
        print("  ", json.dumps(r))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
