"""Where each fused op of an optimized graph sits in the graph it was made from: its boundary tensors.

A rewrite keeps the tensors around what it replaces (``rewrite.edit``: the new op produces the matched output tensor
itself; ``merge_fc``'s SLICEs produce the FCs' own outputs; the Winograd rewrite keeps a conv's input and output),
so a tensor of the optimized graph with the name, shape and dtype of a tensor of the reference graph holds the same
value. Around a fused op there may be a few views the rewrite added (the [rows, 1, C] RESHAPE of a LayerNorm, the
head-split RESHAPEs of an attention, a GroupNorm's kept TRANSPOSE): :func:`find_boundaries` walks through at most
``MAX_VIEWS`` such ops upstream from each input and downstream from the output until it reaches tensors the
reference graph has, and takes those views into the op's *region* (what the probe model runs in isolation).

Ops that do not reach reference tensors that way (a fused op fed by a rewrite's own computation) get a boundary
with ``problem`` set; the report shows the reason instead of numbers.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from sdconvert.graph.ir import Model, Op, Tensor

#: ops a rewrite puts around a fused op that only move or reinterpret data (their other inputs are constants)
VIEW_OPS = frozenset({"RESHAPE", "TRANSPOSE", "SLICE", "EXPAND_DIMS", "SQUEEZE", "DEQUANTIZE"})
MAX_VIEWS = 4


@dataclass
class Boundary:
    """One fused op of the optimized graph's main subgraph and what it is compared against.

    ``region``: the ops to run in isolation (views before, the fused op, views after), in graph order.
    ``feeds``: (optimized-graph tensor fed from the reference run, reference tensor name), one per non-constant
    input of the region. ``output`` / ``ref_output``: the tensor compared and its reference name.
    """

    index: int  # position of the fused op among the main subgraph's ops
    op: Op
    region: list[Op] = field(default_factory=list)
    feeds: list[tuple[Tensor, str]] = field(default_factory=list)
    output: Tensor | None = None
    ref_output: str = ""
    label: str = ""  # the reference tensor whose name says where the op is (see _label)
    problem: str = ""


def is_fused(op: Op) -> bool:
    """Our fused custom ops (``Sd*``), the ones the report has a row for."""
    return op.is_custom and op.type.startswith("Sd")


def _reference_tensors(ref: Model) -> dict[str, Tensor]:
    """Name -> tensor of the reference main subgraph's activations (names that occur twice are left out)."""
    seen: dict[str, Tensor] = {}
    dup: set[str] = set()
    for t in ref.main.tensors:
        if t.is_constant:
            continue
        if t.name in seen:
            dup.add(t.name)
        seen[t.name] = t
    return {k: v for k, v in seen.items() if k not in dup}


def _matches(t: Tensor, known: dict[str, Tensor]) -> bool:
    r = known.get(t.name)
    return r is not None and not t.is_constant and r.shape == t.shape and r.dtype == t.dtype


def _upstream(t: Tensor, known: dict[str, Tensor]) -> tuple[Tensor | None, list[Op]] | str:
    """(the reference tensor ``t`` derives from, or None for a constant chain; the view ops in between)."""
    chain: list[Op] = []
    cur = t
    for _ in range(MAX_VIEWS + 1):
        if cur.is_constant:
            return None, chain
        if _matches(cur, known):
            return cur, chain
        p = cur.producer
        if p is None:
            return f"input {cur.name!r} is a graph input the reference does not have"
        if p.type not in VIEW_OPS or any(i is not None and not i.is_constant for i in p.inputs[1:]):
            return f"input {_tail(cur.name)!r} is computed by {p.type}, which the reference graph does not have"
        chain.append(p)
        cur = p.inputs[0]
    return f"input {_tail(t.name)!r} is more than {MAX_VIEWS} views away from a reference tensor"


def _downstream(t: Tensor, known: dict[str, Tensor]) -> tuple[Tensor, list[Op]] | str:
    chain: list[Op] = []
    cur = t
    for _ in range(MAX_VIEWS + 1):
        if _matches(cur, known):
            return cur, chain
        users = cur.consumers
        if len(users) != 1 or users[0].type not in VIEW_OPS or users[0].inputs[0] is not cur:
            return f"output {_tail(t.name)!r} reaches no reference tensor through views"
        chain.append(users[0])
        cur = users[0].outputs[0]
    return f"output {_tail(t.name)!r} is more than {MAX_VIEWS} views away from a reference tensor"


def find_boundaries(fused: Model, ref: Model) -> list[Boundary]:
    """A :class:`Boundary` for every fused op of ``fused``'s main subgraph that ``ref`` computes differently (an
    ``Sd*`` op present in both with the same output, e.g. fusion done before a Winograd-only optimize, is skipped:
    it is the same kernel on both sides)."""
    known = _reference_tensors(ref)
    ref_ops = {id(t): t.producer for t in known.values()}
    out: list[Boundary] = []
    for index, op in enumerate(fused.main.ops):
        if not is_fused(op) or len(op.outputs) != 1:
            continue
        b = Boundary(index, op)
        down = _downstream(op.outputs[0], known)
        if isinstance(down, str):
            b.problem = down
            out.append(b)
            continue
        b.output, after = down
        b.ref_output = b.output.name
        b.label = _label(known[b.ref_output])
        producer = ref_ops.get(id(known[b.ref_output]))
        if producer is not None and producer.type == op.type and not after:
            continue  # the reference already ran this fused op here
        before: list[Op] = []
        for t in op.inputs:
            if t is None:
                continue
            up = _upstream(t, known)
            if isinstance(up, str):
                b.problem = up
                break
            src, chain = up
            before.extend(reversed(chain))
            if src is not None and all(src is not f for f, _ in b.feeds):
                b.feeds.append((src, src.name))
        if not b.problem:
            order = {id(o): i for i, o in enumerate(fused.main.ops)}
            region = {id(o): o for o in [*before, op, *after]}
            b.region = sorted(region.values(), key=lambda o: order[id(o)])
        out.append(b)
    return out


def _label(t: Tensor) -> str:
    """The name to show for reference tensor ``t``: its own, or for a SiLU ``x * sigmoid(x)`` (the end of a
    GroupNorm+SiLU, named after the block's ``nonlinearity`` module) the name of ``x``, the norm itself."""
    p = t.producer
    if p is not None and p.type == "MUL" and len(p.inputs) == 2 and all(i is not None for i in p.inputs):
        a, b = p.inputs
        for x, s in ((a, b), (b, a)):
            if s.producer is not None and s.producer.type == "LOGISTIC" and s.producer.inputs[0] is x:
                return x.name
    return t.name


def _tail(name: str, n: int = 60) -> str:
    return name if len(name) <= n else "..." + name[-n:]


_MODULE_PATH = re.compile(r"^(?:[A-Za-z_][\w]*\.)+")


def short_location(name: str) -> str:
    """A readable place in the model from a litert-torch tensor name (the torch module path).

    ``sdconvert.export.wrappers.UNet/diffusers...UNet2DConditionModel_unet/diffusers...CrossAttnDownBlock2D_0/
    .../torch.nn.modules.conv.Conv2d_conv1;2`` -> ``CrossAttnDownBlock2D_0/.../conv1``: module packages dropped, the
    wrapper and the top model left out, a ``Class_attr`` segment shown as its attribute name unless that is a list
    index (then the class says more: ``ResnetBlock2D_0``)."""
    path = name.split(";", 1)[0]
    segs = [_MODULE_PATH.sub("", s) for s in path.split("/") if s]
    if len(segs) > 2:
        segs = segs[2:]  # wrapper + the diffusers / transformers model
    shown = []
    for s in segs:
        cls, _, attr = s.partition("_")  # class names have no underscore, attribute names may (conv_shortcut)
        shown.append(attr if cls[:1].isupper() and attr and not attr.isdigit() else s)
    return "/".join(shown) or name


__all__ = ["MAX_VIEWS", "VIEW_OPS", "Boundary", "find_boundaries", "is_fused", "short_location"]
