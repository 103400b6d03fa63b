"""Whole-graph passes that are not fusions: composite inlining and BROADCAST_TO elimination.

- :func:`inline_composites` replaces every ``STABLEHLO_COMPOSITE`` op by a copy of its decomposition subgraph
  (constants shared, not copied). The stock LiteRT GPU accelerator cannot run composites, and after inlining the
  decomposed fusion rules see one canonical form whether or not litert-torch emitted ``odml.*`` composites.
- :func:`remove_broadcasts` rewires elementwise binary ops that read a ``BROADCAST_TO`` output to read its input
  instead, when implicit (numpy-style) broadcasting yields the same output shape; BROADCAST_TO makes the stock GPU
  accelerator fall back to the CPU. Broadcasts feeding other ops (RESHAPE in GroupNorm) are left to
  ``group_norm_stock``.
- :func:`cancel_transpose_pairs` drops TRANSPOSE -> TRANSPOSE chains whose permutations compose to the identity.
  litert-torch keeps SD's NCHW semantics with a TRANSPOSE around each conv; once the GroupNorm rules absorb the
  NHWC -> NCHW transpose they read, the ResNet shortcut convs of the up blocks are left behind a lone pair
  (CONCATENATION -> TRANSPOSE -> TRANSPOSE -> CONV_2D: 28 TRANSPOSEs in the fused SD1.5 UNet), two full copies of
  the activation and two kernel launches for nothing.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..graph.ir import Model, Op, Subgraph, Tensor, clone_options
from .engine import executed_subgraphs
from .match import ELEMENTWISE_BINARY, activation


def _composite_name(op: Op) -> str:
    name = getattr(op.options2, "name", b"") or b""
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def _clone_tensor(sg: Subgraph, t: Tensor) -> Tensor:
    return sg.add_tensor(
        Tensor(
            t.name,
            t.shape,
            t.dtype,
            t.buffer,
            shape_signature=t.shape_signature,
            quantization=t.quantization,
            is_variable=t.is_variable,
            has_rank=t.has_rank,
            sparsity=t.sparsity,
            variant_tensors=t.variant_tensors,
        )
    )


def _inline(model: Model, sg: Subgraph, op: Op, dec: Subgraph) -> bool:
    if len(dec.inputs) != len(op.inputs) or len(dec.outputs) != len(op.outputs):
        return False
    pos = next(i for i, o in enumerate(sg.ops) if o is op)
    mapping: dict[int, Tensor] = {}
    for dt, st in zip(dec.inputs, op.inputs):
        if st is None:
            return False
        mapping[id(dt)] = st
    outs = list(op.outputs)
    op.detach()
    passthrough: list[tuple[Tensor, Tensor]] = []
    for dt, out in zip(dec.outputs, outs):
        if id(dt) in mapping or dt.producer is None:
            passthrough.append((out, dt))
        else:
            mapping[id(dt)] = out

    def get(t: Tensor) -> Tensor:
        if id(t) not in mapping:
            mapping[id(t)] = _clone_tensor(sg, t)
        return mapping[id(t)]

    new_ops = []
    for dop in dec.ops:
        nop = Op(
            dop.opcode,
            [None if t is None else get(t) for t in dop.inputs],
            [get(t) for t in dop.outputs],
            options_type=dop.options_type,
            options=clone_options(dop.options),
            options2_type=dop.options2_type,
            options2=clone_options(dop.options2),
            custom_options=dop.custom_options,
            custom_options_format=dop.custom_options_format,
            mutating_variable_inputs=dop.mutating_variable_inputs,
            intermediates=[get(t) for t in dop.intermediates],
            debug_metadata_index=dop.debug_metadata_index,
        )
        nop.subgraph_refs = dict(dop.subgraph_refs)
        new_ops.append(nop)
    sg.ops[pos : pos + 1] = new_ops
    for out, dt in passthrough:
        src = get(dt)
        sg.replace_uses(out, src)
        for s in model.signatures:
            s.outputs = [(n, src if t is out else t) for n, t in s.outputs]
    return True


def inline_composites(model: Model, *, max_depth: int = 4) -> dict[str, int]:
    """Inline all composites (nested ones too, up to ``max_depth``). Returns ``{composite name: count}``."""
    counts: Counter[str] = Counter()
    for _ in range(max_depth):
        changed = False
        for _, sg in executed_subgraphs(model):
            for op in list(sg.ops):
                if op.type != "STABLEHLO_COMPOSITE":
                    continue
                dec = op.subgraph_refs.get(("options2", "decompositionSubgraphIndex"))
                name = _composite_name(op)
                if dec is not None and _inline(model, sg, op, dec):
                    counts[name] += 1
                    changed = True
        if not changed:
            break
    if counts:
        model.cleanup()
    return dict(counts)


def remove_broadcasts(model: Model) -> int:
    """Feed BROADCAST_TO inputs straight into elementwise consumers where implicit broadcasting suffices."""
    rewired = 0
    for _, sg in executed_subgraphs(model):
        for op in list(sg.ops):
            if op.type != "BROADCAST_TO" or op.inputs[0] is None:
                continue
            x, y = op.inputs[0], op.outputs[0]
            for c in y.consumers:
                if c.type not in ELEMENTWISE_BINARY or len(c.inputs) != 2 or activation(c) and c.type == "POW":
                    continue
                for i in (0, 1):
                    if c.inputs[i] is not y:
                        continue
                    other = c.inputs[1 - i]
                    if other is None or other.shape is None or x.shape is None:
                        continue
                    try:
                        shape = np.broadcast_shapes(tuple(x.shape), tuple(other.shape))
                    except ValueError:
                        continue
                    if tuple(shape) == tuple(c.outputs[0].shape or ()):
                        c.inputs[i] = x
                        rewired += 1
    if rewired:
        model.cleanup()
    return rewired


def _perm(op: Op) -> list[int] | None:
    p = op.inputs[1] if len(op.inputs) > 1 else None
    if p is None or not p.is_constant:
        return None
    return [int(v) for v in p.numpy().reshape(-1)]


def cancel_transpose_pairs(model: Model) -> int:
    """Rewire the readers of ``TRANSPOSE(TRANSPOSE(x, p1), p2)`` to ``x`` when ``p1[p2[j]] == j`` for every axis (the
    two cancel); the inner TRANSPOSE goes too once nothing else reads it. Returns the TRANSPOSEs bypassed."""
    bypassed = 0
    for _, sg in executed_subgraphs(model):
        for op in list(sg.ops):
            if op.type != "TRANSPOSE" or not op.inputs or op.inputs[0] is None:
                continue
            inner = op.inputs[0].producer
            if inner is None or inner.type != "TRANSPOSE" or inner.inputs[0] is None:
                continue
            p1, p2 = _perm(inner), _perm(op)
            if p1 is None or p2 is None or len(p1) != len(p2) or any(p1[p2[j]] != j for j in range(len(p2))):
                continue
            y = op.outputs[0]
            if sg.is_output(y):
                continue
            sg.replace_uses(y, inner.inputs[0])
            bypassed += 1
    if bypassed:
        model.cleanup()
    return bypassed


__all__ = ["cancel_transpose_pairs", "inline_composites", "remove_broadcasts"]
