"""Check every rewrite of a fusion run against the *unfused* model, without any native code.

The unfused model runs once in the stock interpreter with ``experimental_preserve_all_tensors`` (and no default
delegate, so XNNPACK cannot hide intermediates). For each :class:`FusedOp` the captured values of its source
tensors are fed to the op's numpy reference (``sdconvert.ops``) and compared with the captured value of the tensor
the fused op replaced. This validates the rules (attrs, layouts, folded constants) independently of any kernel.

Limitation: only tensors of the signature's subgraph (subgraph 0) can be captured; rewrites elsewhere are skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .engine import FusedOp, TensorRef

# records whose op is not an Sd* op but has the same semantics (``--target litert`` re-emissions)
_SEMANTICS = {"stock_group_norm": "SdGroupNorm"}


@dataclass(frozen=True)
class SemanticResult:
    fused: FusedOp
    max_rel_err: float  # max |reference - captured| / max |captured|


def random_inputs(details: Sequence[dict[str, Any]], seed: int = 0, int_high: int = 1000) -> dict[int, np.ndarray]:
    """Standard-normal floats, integers in [0, int_high) (token ids), keyed by tensor index."""
    rng = np.random.default_rng(seed)
    out = {}
    for d in details:
        if np.issubdtype(d["dtype"], np.integer):
            out[d["index"]] = rng.integers(0, int_high, d["shape"]).astype(d["dtype"])
        else:
            out[d["index"]] = rng.standard_normal(d["shape"]).astype(d["dtype"])
    return out


def _attention_per_head(spec: Any, args: list[np.ndarray], attrs: Any) -> np.ndarray:
    """The attention reference one (batch, head) at a time: its float64 S x S matrix stays per head (SD1.5's
    4096-token self-attention would otherwise need 2 GiB per temporary)."""
    import dataclasses

    q, k, v = args
    n, sq, _ = q.shape
    d = attrs.head_dim
    one = dataclasses.replace(attrs, heads=1)
    out = np.empty(q.shape, np.float64)
    for b in range(n):
        for h in range(attrs.heads):
            cols = slice(h * d, (h + 1) * d)
            out[b : b + 1, :, cols] = spec.reference(
                [q[b : b + 1, :, cols], k[b : b + 1, :, cols], v[b : b + 1, :, cols]], one
            )
    return out


def check_fused(
    src: Path | str, fused: Sequence[FusedOp], *, seed: int = 0, inputs: dict[int, np.ndarray] | None = None
) -> list[SemanticResult]:
    """Run ``src`` (the unfused model) and compare each fused op's reference with the captured tensors."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from .. import ops as sdops

    it = Interpreter(
        model_path=str(src),
        experimental_preserve_all_tensors=True,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    it.allocate_tensors()
    feeds = inputs if inputs is not None else random_inputs(it.get_input_details(), seed)
    for index, value in feeds.items():
        it.set_tensor(index, value)
    it.invoke()

    def value(r: TensorRef) -> np.ndarray:
        if r.value is not None:
            return np.asarray(r.value)
        if r.source_index is None:
            raise ValueError(f"tensor {r.name!r} was created by a rewrite and cannot be captured")
        x = it.get_tensor(r.source_index)
        if r.perm is not None:
            x = np.transpose(x, r.perm)
        return x.reshape(r.shape)

    results = []
    for f in fused:
        if f.subgraph != 0:
            continue
        spec = sdops.get(_SEMANTICS.get(f.op_type, f.op_type))
        attrs = spec.attrs_type(**f.attrs)
        args = [value(r) for r in f.inputs]
        if spec.name == "SdAttention":
            got = _attention_per_head(spec, args, attrs)
        else:
            got = np.asarray(spec.reference(args, attrs), np.float64)
        want = value(f.output).astype(np.float64)
        scale = max(float(np.abs(want).max()), 1e-30)
        results.append(SemanticResult(f, float(np.abs(got - want).max()) / scale))
    return results


__all__ = ["SemanticResult", "check_fused", "random_inputs"]
