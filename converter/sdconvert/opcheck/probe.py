"""The two models the per-op report runs: the reference graph with taps, and the probe of isolated fused ops.

- :func:`tap_reference`: the reference (unfused) model with every boundary tensor added to the main subgraph's
  outputs and to the signature, so one run of it gives each fused op's inputs and expected output. Only these
  tensors are kept alive by the runtime (not every intermediate, as ``preserve_all_tensors`` would, which also
  needs XNNPACK off): on the SD1.5 UNet that is a few GB instead of tens.
- :func:`probe_model`: every fused op's region (see :mod:`.boundary`) as an independent piece of one model, its
  inputs model inputs, its output a model output. One run per backend measures every op on the reference inputs, so
  an op's error is its own, not what earlier ops passed on; on a GPU backend the whole probe is one delegated
  partition. Constants are shared with the optimized model (zero-copy buffers).

Test entry point: ``plant(index, op)`` is called with each fused op's graph position (the report's ``#``) and its
copy in the probe before the probe is written; a test edits one (e.g. SdGelu's ``approximate`` attribute: a wrong
GELU kernel) to check the report points at it. The product never passes it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sdconvert.graph.ir import Model, Op, SignatureDef, Subgraph, Tensor, clone_options

from .boundary import Boundary

#: test entry point (module docstring): (the fused op's index in the graph, its copy in the probe) -> None
Plant = Callable[[int, Op], None]


def tap_reference(ref: Model, names: Sequence[str]) -> dict[str, str]:
    """Add the main-subgraph tensors ``names`` to ``ref``'s outputs (in place). Returns name -> signature key.

    Tensors that are model inputs are not tapped (the caller fed them)."""
    sig = next((s for s in ref.signatures if s.subgraph is ref.main), None)
    if sig is None:
        raise ValueError("the reference model has no signature for its main subgraph")
    by_name = {t.name: t for t in ref.main.tensors if not t.is_constant}
    inputs = {id(t) for t in ref.main.inputs}
    keys: dict[str, str] = {}
    for i, name in enumerate(dict.fromkeys(names)):
        t = by_name[name]
        if id(t) in inputs:
            continue
        key = f"sdconvert_tap_{i}"
        if not ref.main.is_output(t):
            ref.main.outputs.append(t)
        sig.outputs.append((key, t))
        keys[name] = key
    return keys


@dataclass(frozen=True)
class ProbeRow:
    """Where one boundary's tensors are in the probe model: signature keys of its inputs (in ``feeds`` order)
    and of its output."""

    row: int
    inputs: tuple[str, ...]
    output: str


def probe_model(boundaries: Sequence[tuple[int, Boundary]], plant: Plant | None = None) -> tuple[Model, list[ProbeRow]]:
    """One model holding each ``(row, boundary)``'s region on its own inputs (boundaries with a problem are not
    given)."""
    sg = Subgraph("main")
    sig = SignatureDef("serving_default", sg)
    rows: list[ProbeRow] = []
    for row, b in boundaries:
        assert b.output is not None and not b.problem
        mapped: dict[int, Tensor] = {}

        def tensor(t: Tensor) -> Tensor:
            new = mapped.get(id(t))
            if new is None:
                if t.is_constant:
                    new = Tensor(t.name, t.shape, t.dtype, t.buffer, quantization=t.quantization,
                                 shape_signature=t.shape_signature)
                else:
                    new = Tensor(f"r{row}/{t.name}", t.shape, t.dtype, shape_signature=t.shape_signature)
                mapped[id(t)] = sg.add_tensor(new)
            return new

        keys = []
        for j, (t, _) in enumerate(b.feeds):
            x = tensor(t)
            sg.inputs.append(x)
            keys.append(f"r{row}_in{j}")
            sig.inputs.append((keys[-1], x))
        for op in b.region:
            new = Op(op.opcode, [None if t is None else tensor(t) for t in op.inputs],
                     [tensor(t) for t in op.outputs], options_type=op.options_type, options=clone_options(op.options),
                     options2_type=op.options2_type, options2=clone_options(op.options2),
                     custom_options=op.custom_options, custom_options_format=op.custom_options_format)
            if op is b.op and plant is not None:
                plant(b.index, new)
            sg.ops.append(new)
        y = mapped[id(b.output)]
        sg.outputs.append(y)
        sig.outputs.append((f"r{row}_out", y))
        rows.append(ProbeRow(row, tuple(keys), f"r{row}_out"))
    return Model(subgraphs=[sg], signatures=[sig]), rows


__all__ = ["Plant", "ProbeRow", "probe_model", "tap_reference"]
