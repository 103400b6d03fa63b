"""Small helpers for tests that build graphs in the converter's IR by hand (imported by the test files here)."""
from __future__ import annotations

from sdconvert.graph import Model, Op, OpCode, SignatureDef, Subgraph, Tensor


def single_subgraph_model(sg: Subgraph, ins: list[Tensor], outs: list[Tensor]) -> Model:
    """A model of `sg` alone with one ``serving_default`` signature over its inputs and outputs."""
    sg.inputs, sg.outputs = ins, outs
    return Model([sg], [SignatureDef("serving_default", sg, [(t.name, t) for t in ins], [(t.name, t) for t in outs])])


def relu(sg: Subgraph, x: Tensor) -> Tensor:
    """A RELU reading `x`: a consumer, so the tensor under test need not be a model output."""
    y = sg.add_tensor(Tensor(f"relu_{len(sg.ops)}", x.shape))
    sg.ops.append(Op(OpCode.of("RELU"), [x], [y]))
    return y
