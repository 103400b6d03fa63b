"""``merge_sibling_fcs``: FULLY_CONNECTED ops that read the same input become one wider FULLY_CONNECTED + SLICEs.

SD graphs project one tensor many times: an attention's q, k and v read the same normed hidden states; every
cross-attention's k and v (32 FCs in the SD1.5 UNet) read the same text states; every ResNet's ``time_emb_proj``
(22) reads the same SiLU(time embedding). Each of those GEMMs is small (as few as 1 or 77 rows), so a GPU spends
them on launch latency and half-empty tiles; one GEMM with the weights stacked along N fills the device and reads
the input once. The price is one SLICE per original output, a copy along the last axis with at least one kernel
launch unless the delegate makes it a view (below): on the H200 such a copy costs 4-8 us of device time whatever its
size, and with copies the UNet step still netted ~0.8 ms (BENCHMARKS.md). The 4096-row q/k/v of the 64x64 level about break even (3 x 0.037 ms of GEMM -> 0.087 ms,
plus 3 x 8 us of SLICE); the few-row projections gain most. Numerics: each output column is the same dot product;
our CPU kernels give bit-identical results, GPU GEMMs may pick another tile plan (split-K) for the wider problem,
which changes only the summation order (~1e-6 relative).

Bias-free siblings merge per output width (SD1.5's 32 cross-attention k/v FCs become three merged FCs, widths 320,
640 and 1280): our GPU delegate then runs each merged FC as one GEMM batched over its equal column blocks and its
SLICEs launch nothing (``GpuPartition``: column splits). Siblings with a bias merge whatever their widths (the
time-embedding projections: at batch 1 their slices are contiguous runs, which the delegate also treats as views).

Merged: FCs whose input is the same tensor, with equal options (activation, keepNumDims, weights format), float32
weights that are constants or ``DEQUANTIZE`` of float16 constants used only by that FC (merged into one
DEQUANTIZE), optional float32 constant biases (a missing bias becomes zeros when a sibling has one), and outputs
that are not subgraph outputs. The merged FC takes the position of the first sibling, the SLICEs follow it, except
for a projection of a ``[rows, C]`` input with at most ``HOIST_MAX_ROWS`` rows: it moves to just after its input
is computed, together with the ops no larger than that input that compute it (``_hoist``). In SD that is the time
embedding's: each ResNet applies SiLU to it and projects it after its conv1, so the merged projection stood after
the FIRST ResNet's conv1, and the GPU delegate, which folds a residual ADD into the conv that writes the other
operand only when the added tensor exists before that conv runs, could not fold that ResNet's time-embedding ADD
(one more launch, and its norm2 kept its own statistics pass). Hoisting moves only a few-row chain (SD: a
[batch, 1280] SiLU), so no large tensor lives longer.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..graph.ir import Model, Op, OpCode, Subgraph, Tensor, clone_options
from ..graph.schema import S
from .edit import take_output
from .engine import executed_subgraphs


def _weight(op: Op) -> tuple[str, np.ndarray] | None:
    """(kind, [N, K] array) of the FC's weights: ``f32`` constant or ``f16`` constant behind a private DEQUANTIZE."""
    w = op.inputs[1] if len(op.inputs) > 1 else None
    if w is None or w.shape is None or len(w.shape) != 2:
        return None
    if w.is_constant and w.dtype == S.TensorType.FLOAT32:
        return "f32", w.numpy()
    src = w.producer
    if (
        src is not None
        and src.type == "DEQUANTIZE"
        and len(w.consumers) == 1
        and src.inputs[0] is not None
        and src.inputs[0].is_constant
        and src.inputs[0].dtype == S.TensorType.FLOAT16
    ):
        return "f16", src.inputs[0].numpy()
    return None


def _bias(op: Op) -> np.ndarray | None | bool:
    """The FC's bias array, None without one, False when it is not a float32 constant (not mergeable)."""
    b = op.inputs[2] if len(op.inputs) > 2 else None
    if b is None:
        return None
    if not b.is_constant or b.dtype != S.TensorType.FLOAT32:
        return False
    return b.numpy().reshape(-1)


def _options_key(op: Op) -> tuple:
    o = op.options
    return tuple(sorted(vars(o).items())) if o is not None else ()


def _mergeable(sg: Subgraph, op: Op) -> bool:
    out = op.outputs[0] if op.outputs else None
    x = op.inputs[0] if op.inputs else None
    return (
        op.type == "FULLY_CONNECTED"
        and len(op.outputs) == 1
        and x is not None
        and x.dtype == S.TensorType.FLOAT32
        and out.shape is not None
        and len(out.shape) >= 1
        and not sg.is_output(out)
        and _weight(op) is not None
        and _bias(op) is not False
    )


HOIST_MAX_ROWS = 16  # a merged FC over a [rows, C] input of at most this many rows (SD: the time embedding) is hoisted


def _hoist(sg: Subgraph, op: Op, max_elems: int, done: set[int] | None = None) -> None:
    """Move ``op`` to just after the last producer of its inputs, first hoisting each producer whose outputs all have
    at most ``max_elems`` elements (so only small tensors start living earlier); a producer that reads only constants
    (the merged fp16 weights' DEQUANTIZE, which runs once) moves along to just before ``op``. Topological order is
    kept: an op only ever moves to a position after all of its producers."""
    done = set() if done is None else done
    if id(op) in done:
        return
    done.add(id(op))
    producers = [t.producer for t in op.inputs if t is not None and t.producer is not None and t.producer in sg.ops]
    const, deps = [], []
    for p in producers:
        (const if all(t is None or t.is_constant for t in p.inputs) else deps).append(p)
    for p in deps:
        if all(0 <= o.numel <= max_elems for o in p.outputs):
            _hoist(sg, p, max_elems, done)
    target = max((sg._index(p) for p in deps), default=-1) + 1
    if sg._index(op) > target:
        sg.ops.remove(op)
        sg.ops.insert(target, op)
    for c in const:
        if sg._index(c) > sg._index(op):
            sg.ops.remove(c)
            sg.insert_op(c, before=op)


def _merge_group(sg: Subgraph, group: list[Op]) -> None:
    first = min(group, key=sg._index)
    weights = [_weight(op) for op in group]
    kind = weights[0][0]
    stacked = np.concatenate([w for _, w in weights], axis=0)
    widths = [int(w.shape[0]) for _, w in weights]
    name = group[0].outputs[0].name.split(";")[0] + ";merged_fc"
    w_const = sg.new_constant(name + "_w", stacked)
    if kind == "f16":
        w_in = sg.new_tensor(name + "_w_f32", stacked.shape)
        sg.insert_op(Op(OpCode.of("DEQUANTIZE"), [w_const], [w_in]), before=first)
    else:
        w_in = w_const
    biases = [_bias(op) for op in group]
    bias_in = None
    if any(b is not None for b in biases):
        full = [np.zeros(n, np.float32) if b is None else b.astype(np.float32) for b, n in zip(biases, widths)]
        bias_in = sg.new_constant(name + "_b", np.concatenate(full))
    out0 = group[0].outputs[0]
    merged_shape = list(out0.shape[:-1]) + [sum(widths)]
    merged = sg.new_tensor(name, merged_shape)
    fc = Op(
        first.opcode,
        [first.inputs[0], w_in] + ([bias_in] if bias_in is not None else []),
        [merged],
        options_type=first.options_type,
        options=clone_options(first.options),
    )
    sg.insert_op(fc, before=first)
    offset = 0
    prev = fc
    for op, n in zip(group, widths):
        out = op.outputs[0]
        begin = [0] * len(merged_shape)
        begin[-1] = offset
        size = list(merged_shape)
        size[-1] = n
        # the SLICE produces the FC's own output tensor (name and all), so tensors of the merged graph keep the
        # names of the graph as exported: ``sdconvert --verify``'s per-op report finds fused ops' inputs by name
        take_output(sg, out)
        sl = Op(
            OpCode.of("SLICE"),
            [merged, sg.new_constant(name + "_begin", np.array(begin, np.int32)),
             sg.new_constant(name + "_size", np.array(size, np.int32))],
            [out],
            options_type=S.BuiltinOptions.SliceOptions,
            options=S.SliceOptionsT(),
        )
        sg.insert_op(sl, after=prev)
        prev = sl
        offset += n
    sg.remove_ops(group)
    x = fc.inputs[0]
    if x.shape is not None and len(x.shape) == 2 and 0 < int(x.shape[0]) <= HOIST_MAX_ROWS:  # [batch, C]
        _hoist(sg, fc, x.numel)
        prev = fc
        for sl in sorted(merged.consumers, key=sg._index):  # the SLICEs (their only readers) follow it again
            sg.ops.remove(sl)
            sg.insert_op(sl, after=prev)
            prev = sl


def _by_width(group: list[Op]) -> list[list[Op]]:
    """A bias-free group split by output width (module docstring); a group where any FC has a bias stays whole."""
    if any(_bias(op) is not None for op in group):
        return [group]
    parts: dict[int, list[Op]] = defaultdict(list)
    for op in group:
        parts[int(op.outputs[0].shape[-1])].append(op)
    return list(parts.values())


def merge_sibling_fcs(model: Model) -> int:
    """Merge every group of >= 2 sibling FCs (see the module docstring). Returns the number of FCs removed."""
    removed = 0
    for _, sg in executed_subgraphs(model):
        groups: dict[tuple, list[Op]] = defaultdict(list)
        for op in sg.ops:
            if _mergeable(sg, op):
                w = _weight(op)
                x = op.inputs[0]
                lead = tuple(op.outputs[0].shape[:-1])
                groups[(id(x), _options_key(op), w[0], int(w[1].shape[1]), lead)].append(op)
        for group in groups.values():
            for part in _by_width(group):
                if len(part) >= 2:
                    _merge_group(sg, part)
                    removed += len(part) - 1
    if removed:
        model.cleanup()
    return removed


__all__ = ["merge_sibling_fcs"]
