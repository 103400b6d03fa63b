"""Writes tests/native_cc/data/tiny_unet_ops.bin: the fused ops of the tiny UNet (``sdconvert --random-weights tiny
--fuse --winograd 4``), one case per distinct (op, options, shapes), plus one ResNet-block chain (GroupNorm+SiLU ->
Winograd conv, twice) that runs as one delegate partition, each with its x86-64 reference output.

The reference is what the delegate's CPU backend computes on x86-64, run through the real runtime (ai-edge-litert's
interpreter), and it must agree with the float64 numpy definition of each op (sdconvert.ops) within 1e-5 relative
before it is stored. The native test (tiny_unet_ops_test.cc) then checks any build (x86-64, aarch64 under qemu)
against it. Run once, from the repository root, after changing the ops' semantics:

    python tests/native_cc/make_tiny_unet_ops.py [--out tests/native_cc/data/tiny_unet_ops.bin]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "native"))

from op_cases import CONST, INPUT, INTERMEDIATE, OUTPUT, Case, NodeSpec, TensorSpec, write_cases  # noqa: E402

DEFAULT_OUT = HERE / "data" / "tiny_unet_ops.bin"
NUM_THREADS = 2  # the native test uses the same


def _input_ranges(op: str, index: int, dims: tuple[int, ...]) -> tuple[float, float]:
    """(offset, scale) of generated input ``index`` of ``op``: activations around the ranges SD sees, GroupNorm
    inputs off-centre (the mean must be subtracted), conv filters scaled like a trained layer (fan-in)."""
    if op == "SdGroupNorm":
        return [(0.5, 2.0), (1.0, 0.5), (0.0, 0.5)][index]
    if op == "SdConv2DWinograd":
        if index == 1:
            return 0.0, float(np.float32(1.0 / np.sqrt(9 * dims[3])))
        return (0.0, 1.0) if index == 0 else (0.0, 0.1)
    if op == "SdGelu":
        return 0.0, 3.0
    return 0.0, 1.0  # SdAttention q, k, v


def model_cases(unet: Path) -> list[Case]:
    from sdconvert.graph import read_model

    model = read_model(unet)
    seen: set[tuple] = set()
    cases: list[Case] = []
    for op in model.subgraphs[0].ops:
        if not op.is_custom or not op.type.startswith("Sd"):
            continue
        shapes = tuple(tuple(int(d) for d in t.shape) for t in op.inputs)
        const = tuple(t.is_constant for t in op.inputs)
        key = (op.type, bytes(op.custom_options), shapes, const)
        if key in seen:
            continue
        seen.add(key)
        case = Case(f"{op.type}_{len(cases):02d}_" + "_".join("x".join(map(str, s)) for s in shapes))
        for i, (dims, is_const) in enumerate(zip(shapes, const)):
            offset, scale = _input_ranges(op.type, i, dims)
            case.tensors.append(TensorSpec(CONST if is_const else INPUT, dims, seed=1000 * len(cases) + i,
                                           offset=offset, scale=scale))
        out_dims = tuple(int(d) for d in op.outputs[0].shape)
        case.tensors.append(TensorSpec(OUTPUT, out_dims))
        case.nodes.append(NodeSpec(op.type, bytes(op.custom_options), list(range(len(shapes))), [len(shapes)]))
        cases.append(case)
    return cases


def resnet_chain(cases: list[Case]) -> Case:
    """GroupNorm+SiLU -> conv -> GroupNorm+SiLU -> conv on the 8x8x32 level, with the model's own options."""
    gn = next(c for c in cases if c.nodes[0].op == "SdGroupNorm" and c.tensors[0].dims == (1, 8, 8, 32)
              and b"silu" in c.nodes[0].options)
    conv = next(c for c in cases if c.nodes[0].op == "SdConv2DWinograd" and c.tensors[0].dims == (1, 8, 8, 32)
                and c.tensors[1].dims == (32, 3, 3, 32))
    x = (1, 8, 8, 32)
    chain = Case("resnet_chain_8x8x32")
    t = chain.tensors
    t.append(TensorSpec(INPUT, x, seed=90_000, offset=0.5, scale=2.0))                      # 0 x
    for k in range(2):
        base = len(t)
        t.append(TensorSpec(CONST, (32,), seed=90_001 + 10 * k, offset=1.0, scale=0.5))    # gamma
        t.append(TensorSpec(CONST, (32,), seed=90_002 + 10 * k, offset=0.0, scale=0.5))    # beta
        t.append(TensorSpec(INTERMEDIATE, x))                                               # gn out
        t.append(TensorSpec(CONST, (32, 3, 3, 32), seed=90_003 + 10 * k, scale=float(np.float32(1 / np.sqrt(288)))))
        t.append(TensorSpec(CONST, (32,), seed=90_004 + 10 * k, scale=0.1))                 # bias
        t.append(TensorSpec(OUTPUT if k == 1 else INTERMEDIATE, x))                         # conv out
        src = 0 if k == 0 else base - 1
        chain.nodes.append(NodeSpec("SdGroupNorm", gn.nodes[0].options, [src, base, base + 1], [base + 2]))
        chain.nodes.append(NodeSpec("SdConv2DWinograd", conv.nodes[0].options, [base + 2, base + 3, base + 4],
                                    [base + 5]))
    return chain


def numpy_reference(case: Case) -> dict[int, np.ndarray]:
    """Output tensors of the case by the float64 definitions of sdconvert.ops (each node rounded to float32)."""
    from sdconvert.ops import get

    values = {i: t.values() for i, t in enumerate(case.tensors) if t.kind in (INPUT, CONST)}
    for node in case.nodes:
        spec = get(node.op)
        values[node.outputs[0]] = spec.reference([values[i] for i in node.inputs], spec.decode(node.options))
    return {i: values[i] for i, t in enumerate(case.tensors) if t.kind == OUTPUT}


def delegate_outputs(case: Case) -> dict[int, np.ndarray]:
    """Output tensors of the case through ai-edge-litert with the delegate's CPU backend (every node claimed)."""
    import harness
    from tflite_models import GraphBuilder

    g = GraphBuilder()
    ids: list[int] = []
    feeds: dict[str, np.ndarray] = {}
    for i, t in enumerate(case.tensors):
        name = f"t{i}"
        if t.kind == INPUT:
            ids.append(g.input(name, t.dims))
            feeds[name] = t.values()
        elif t.kind == CONST:
            ids.append(g.const(name, t.values()))
        else:
            ids.append(g.tensor(name, t.dims))
    for node in case.nodes:
        g.custom(node.op, [ids[i] for i in node.inputs], [ids[i] for i in node.outputs], node.options)
    outputs = [i for i, t in enumerate(case.tensors) if t.kind == OUTPUT]
    for i in outputs:
        g.output(ids[i])
    run = harness.run(g.build(), feeds, backend="cpu", num_threads=NUM_THREADS)
    assert run.stats["claimed_nodes"] == len(case.nodes), (case.name, run.stats)
    return {i: run.outputs[f"t{i}"] for i in outputs}


def build_cases(unet: Path) -> list[Case]:
    import harness

    cases = model_cases(unet)
    cases.append(resnet_chain(cases))
    for case in cases:
        expected = numpy_reference(case)
        for i, actual in delegate_outputs(case).items():
            harness.assert_close(actual, expected[i], rtol=1e-5)
            case.tensors[i].set_reference(actual)
    return cases


def convert_tiny_unet(out: Path) -> Path:
    from sdconvert.export.convert import ConvertOptions, run
    from sdconvert.export.optimize import GraphOptions

    result = run(ConvertOptions(out=out, random_weights="tiny", models=("unet",), quiet=True,
                                graph=GraphOptions(fuse=True, winograd="4")))
    assert result.ok
    return out / "unet.tflite"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--unet", type=Path, help="an existing tiny fused + Winograd unet.tflite (default: convert)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        unet = args.unet or convert_tiny_unet(Path(tmp) / "tiny")
        cases = build_cases(unet)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_cases(args.out, cases)
    floats = sum(t.sample.size for c in cases for t in c.tensors if t.kind == OUTPUT)
    print(f"{args.out}: {len(cases)} cases, {floats} stored reference values, {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
