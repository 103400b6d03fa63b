"""Attention: softmax(scale · Q·Kᵀ [+ causal mask]) · V with its head split/merge -> ``SdAttention``.

What litert-torch emits (tiny UNet/VAE/CLIP, checked by the tests):

- UNet (diffusers ``Attention``): ``FC -> RESHAPE [N,S,H,D] -> TRANSPOSE -> RESHAPE [N*H,S,D]`` for Q and V, K with
  ``TRANSPOSE [0,2,3,1]`` (already transposed for the matmul), ``BATCH_MATMUL -> RESHAPE -> SOFTMAX -> RESHAPE ->
  BATCH_MATMUL -> RESHAPE -> TRANSPOSE -> RESHAPE [N*S, H*D]``. The 1/sqrt(D) scale is folded into the Q weights.
- VAE mid-block (one head): Q·Kᵀ is a ``FULLY_CONNECTED`` whose *weights* are the K activations.
- CLIP: the causal mask is ``ADD(scores, SELECT_V2(const_bool, 0, -inf))``; it is evaluated and must really be
  causal (key j > query i masked, everything else 0) to become ``causal=true``; another constant mask is rejected.
- ``odml.scaled_dot_product_attention`` composites: inlined first, their decomposition has MUL(sqrt(scale)) on Q
  and K, which the operand chains fold into ``scale``.

Alternatives (anchor: ``SOFTMAX``): Q·Kᵀ as ``BATCH_MATMUL`` (K transposed or ``adj_y``) or ``FULLY_CONNECTED``;
P·V as ``BATCH_MATMUL`` or ``FULLY_CONNECTED`` (Vᵀ as weights). Scale may sit on Q, on K (scalar MUL/DIV inside the
operand chains), on the scores (before the softmax) or in the softmax ``beta``: all are multiplied into ``scale``.

The operands of the fused op are the *roots* of the head-split chains ([N,S,H*D], the projection outputs), found with
exact index maps (:mod:`..match`); a chain that is not a head split falls back to ``heads=1`` on the pre-split
[N*H,S,D] operands, which the contract allows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import ops as sdops
from ...graph.ir import Op, Tensor
from ...ops.attention import AttentionAttrs
from ..edit import custom_op, emit_to, reshape, transpose
from ..engine import Alternative, Check, Context, FusedOp, Match, Rule, ref
from ..match import FLOAT32, Chain, activation, apply_layout, back_chains, const_value, data_and_scale, iota

# --- the documented variant choice -------------------------------------------------------------------------------

SCORES_BUDGET_BYTES = 2 * 1024 * 1024
FLASH_MAX_HEAD_DIM = 128


def choose_attention_variant(
    seq_q: int,
    seq_k: int,
    head_dim: int,
    *,
    scores_budget: int = SCORES_BUDGET_BYTES,
    flash_max_head_dim: int = FLASH_MAX_HEAD_DIM,
) -> str:
    """``flash`` or ``partial_softmax`` for one attention shape (per head).

    Rule: use ``flash`` when one head's fp32 score matrix (seq_q x seq_k x 4 bytes) is larger than ``scores_budget``
    (default 2 MiB, a typical mobile-GPU L2 / what fits on chip) *and* head_dim <= ``flash_max_head_dim`` (128);
    otherwise ``partial_softmax``. The fusion pass takes both numbers from the device profile (``--device-profile``,
    ``sdconvert.winograd.cost.DeviceProfile``): the defaults are the mobile profile's; the ``h200`` profile says
    0 and 512, because there our flash kernels beat the two-pass softmax at every SD1.5 shape (measured).

    Why: both variants avoid writing the full matrix. Partial softmax re-reads K in its second pass and keeps no
    per-query accumulator, which is cheapest when Sk is short (cross-attention with 77 text tokens, the 16x16/8x8
    UNet levels) or when head_dim is large (VAE mid-block: one 512-wide head, whose flash accumulator would not fit
    in registers/local memory). Flash reads K and V once with an online softmax, which wins when the scores for one
    head are big: SD1.5's 64x64-level self-attention (4096 x 4096 = 64 MiB per head) and the 32x32 level (4 MiB).
    """
    if seq_q * seq_k * 4 > scores_budget and head_dim <= flash_max_head_dim:
        return "flash"
    return "partial_softmax"


# --- pattern -----------------------------------------------------------------------------------------------------

_MATMULS = ("BATCH_MATMUL", "FULLY_CONNECTED")


def _keeps_last2(op: Op) -> bool:
    i, o = op.inputs[0], op.outputs[0]
    return (
        i is not None
        and i.shape is not None
        and o.shape is not None
        and len(i.shape) >= 2
        and len(o.shape) >= 2
        and tuple(i.shape[-2:]) == tuple(o.shape[-2:])
    )


def _pattern(ctx: Context, sm: Op) -> Match | None:
    x = sm.inputs[0]
    if x is None or x.shape is None or len(x.shape) < 2 or x.dtype != FLOAT32:
        return None
    beta = float(getattr(sm.options, "beta", 1.0) or 1.0)
    score_ops: list[Op] = []  # between the Q·Kᵀ op and the softmax, nearest first
    scale, mask, mask_add = beta, None, None
    cur = x
    qk = None
    for _ in range(8):
        p = cur.producer
        if p is None:
            return None
        if p.type in _MATMULS:
            qk = p
            break
        if p.type == "RESHAPE" and _keeps_last2(p):
            cur = p.inputs[0]
        elif p.type in ("MUL", "DIV") and data_and_scale(p) is not None:
            d, s = data_and_scale(p)  # type: ignore[misc]
            scale *= s
            cur = d
        elif p.type == "ADD" and mask_add is None and not activation(p):
            a, b = p.inputs
            if a is None or b is None:
                return None
            if const_value(b, max_ops=16) is not None:
                cur, mask = a, b
            elif const_value(a, max_ops=16) is not None:
                cur, mask = b, a
            elif b.producer is None or b.producer.type not in _MATMULS + ("RESHAPE",):
                cur, mask = a, b
            else:
                cur, mask = b, a
            mask_add = p
        else:
            return None
        score_ops.append(p)
    if qk is None:
        return None
    # forward: probabilities -> (RESHAPE)* -> P·V
    prob_ops: list[Op] = []
    cur = sm.outputs[0]
    pv = None
    for _ in range(4):
        cs = cur.consumers
        nxt = next((c for c in cs if c.type in _MATMULS and c.inputs[0] is cur), None)
        if nxt is not None:
            pv = nxt
            break
        nxt = next((c for c in cs if c.type == "RESHAPE" and _keeps_last2(c)), None)
        if nxt is None:
            return None
        prob_ops.append(nxt)
        cur = nxt.outputs[0]
    if pv is None:
        return None
    alt = f"qk_{qk.type.lower()}+pv_{pv.type.lower()}"
    return Match(
        alt,
        sm,
        [qk, *score_ops, sm, *prob_ops, pv],
        dict(qk=qk, pv=pv, score_ops=score_ops, prob_ops=prob_ops, scale=scale, mask=mask, mask_add=mask_add),
    )


# --- check -------------------------------------------------------------------------------------------------------


@dataclass
class _Split:
    chain: Chain
    n: int
    heads: int
    channels: int
    perm: tuple[int, ...] | None = None  # transpose applied to the root before reshaping (fallback only)


@dataclass
class _Plan:
    q: _Split
    k: _Split
    v: _Split
    out: Tensor
    out_ops: list[Op]
    n: int
    heads: int
    head_dim: int
    seq_q: int
    seq_k: int
    scale: float
    causal: bool


def _head_splits(t: Tensor, b: int, s: int, d: int, transposed: bool) -> dict[int, _Split]:
    """Head counts H for which ``t`` ([B,S,D], or [B,D,S] if ``transposed``) is the head split of a root [N,S,H*D]."""
    found: dict[int, _Split] = {}
    for chain in reversed(back_chains(t)):
        r = chain.root
        if r.shape is None or len(r.shape) < 2 or r.dtype != FLOAT32:
            continue
        c = int(r.shape[-1])
        if c % d:
            continue
        h = c // d
        if h in found or b % h:
            continue
        n = b // h
        if r.numel != n * s * c:
            continue
        got = apply_layout(iota(r.shape), chain.ops).reshape(-1)
        exp = iota((n, s, h, d)).transpose(0, 2, 1, 3).reshape(b, s, d)
        if transposed:
            exp = exp.transpose(0, 2, 1)
        if got.size == exp.size and np.array_equal(got, exp.reshape(-1)):
            found[h] = _Split(chain, n, h, c)
    if 1 not in found and transposed and t.shape is not None and len(t.shape) >= 2:
        p = list(range(len(t.shape)))
        p[-1], p[-2] = p[-2], p[-1]
        found[1] = _Split(Chain(t), b, 1, d, tuple(p))
    return found


def _head_merges(
    sg: Any, o: Tensor, b: int, sq: int, d: int, heads: Iterable[int]
) -> dict[int, tuple[Tensor, list[Op]]]:
    """Which of ``heads`` make a tensor after ``o`` ([B,Sq,D]) the head merge [N,Sq,H*D]; farthest tensor wins."""
    chain_ts: list[tuple[Tensor, list[Op]]] = [(o, [])]
    cur, ops = o, []
    for _ in range(6):
        cs = cur.consumers
        if len(cs) != 1 or sg.is_output(cur) or cs[0].type not in ("RESHAPE", "TRANSPOSE"):
            break
        op = cs[0]
        if op.type == "TRANSPOSE" and op.inputs[1] is not None and const_value(op.inputs[1], 0) is None:
            break
        ops = ops + [op]
        cur = op.outputs[0]
        chain_ts.append((cur, list(ops)))
    found: dict[int, tuple[Tensor, list[Op]]] = {}
    base = iota(o.shape)  # type: ignore[arg-type]
    for h in sorted(heads):
        n = b // h
        exp = iota((n, h, sq, d)).transpose(0, 2, 1, 3).reshape(-1)
        for t, t_ops in reversed(chain_ts):
            got = apply_layout(base, t_ops).reshape(-1)
            if got.size == exp.size and np.array_equal(got, exp):
                found[h] = (t, t_ops)
                break
    return found


def _causal_kind(mask: np.ndarray, out_shape: tuple[int, ...], sq: int, sk: int) -> str | None:
    """'none' (all zero), 'causal' (key j > query i masked) or None (anything else)."""
    try:
        full = np.broadcast_to(mask, out_shape).reshape(-1, sq, sk)
    except ValueError:
        return None
    m = full[0]
    if not np.all(full == m):
        return None
    if np.all(m == 0):
        return "none"
    upper = np.triu(np.ones((sq, sk), bool), k=1)
    if np.all(m[~upper] == 0) and np.all(m[upper] <= -1e9):
        return "causal"
    return None


def _check(ctx: Context, m: Match) -> Check:
    sg = ctx.sg
    qk: Op = m.captures["qk"]
    pv: Op = m.captures["pv"]
    scores = qk.outputs[0]
    sm: Op = m.anchor
    sq, sk = int(sm.inputs[0].shape[-2]), int(sm.inputs[0].shape[-1])  # type: ignore[index]
    if scores.numel % (sq * sk):
        return Check.reject(f"scores {list(scores.shape or ())} are not [.., {sq}, {sk}]")
    b = scores.numel // (sq * sk)
    # intermediate tensors must not escape the pattern
    inner = m.captures["score_ops"] + [sm] + m.captures["prob_ops"]
    inner_ids = {id(o) for o in m.ops}
    for op in [qk] + inner:
        for t in op.outputs:
            if sg.is_output(t) or any(id(c) not in inner_ids for c in t.consumers):
                return Check.reject(f"intermediate {op.type} output is used outside the attention")
    if activation(qk) or activation(pv):
        return Check.reject("matmul with a fused activation")
    # operands
    if qk.type == "BATCH_MATMUL":
        q_t, k_t = qk.inputs[0], qk.inputs[1]
        q_tr = bool(getattr(qk.options, "adjX", False))
        k_tr = not bool(getattr(qk.options, "adjY", False))  # operand is Kᵀ [B,D,Sk] unless adj_y
    else:
        q_t, k_t = qk.inputs[0], qk.inputs[1]
        q_tr, k_tr = False, False
        if len(qk.inputs) > 2 and qk.inputs[2] is not None:
            bias = const_value(qk.inputs[2])
            if bias is None or np.any(bias != 0):
                return Check.reject("Q·Kᵀ FULLY_CONNECTED has a bias")
        if k_t is not None and k_t.is_constant:
            return Check.reject("Q·Kᵀ FULLY_CONNECTED has constant weights (a projection, not attention)")
    if pv.type == "BATCH_MATMUL":
        if bool(getattr(pv.options, "adjX", False)):
            return Check.reject("P·V with adj_x")
        v_t, v_tr = pv.inputs[1], bool(getattr(pv.options, "adjY", False))
    else:
        v_t, v_tr = pv.inputs[1], True
        if v_t is not None and v_t.is_constant:
            return Check.reject("P·V FULLY_CONNECTED has constant weights")
        if len(pv.inputs) > 2 and pv.inputs[2] is not None:
            return Check.reject("P·V FULLY_CONNECTED has a bias")
    if q_t is None or k_t is None or v_t is None or any(t.shape is None or len(t.shape) < 2 for t in (q_t, k_t, v_t)):
        return Check.reject("operand without a static shape")
    if any(t.dtype != FLOAT32 for t in (q_t, k_t, v_t)):
        return Check.reject("operands are not float32")
    d = int(q_t.shape[-2] if q_tr else q_t.shape[-1])  # type: ignore[index]
    dk = int(k_t.shape[-2] if k_tr else k_t.shape[-1])  # type: ignore[index]
    out = pv.outputs[0]
    dv = int(out.shape[-1]) if out.shape else -1
    if d != dk or d != dv:
        return Check.reject(f"head dims differ (q {d}, k {dk}, v {dv}); SdAttention needs one head_dim")
    for name, t, s in (("Q", q_t, sq), ("K", k_t, sk), ("V", v_t, sk)):
        if t.numel != b * s * d:
            return Check.reject(f"{name} {list(t.shape or ())} does not match batch {b} x {s} x {d} (broadcast batch?)")
    if out.numel != b * sq * d:
        return Check.reject("P·V output size mismatch")
    # scale from the score chain, the softmax beta and the operand chains (fixed below once roots are chosen)
    scale = float(m.captures["scale"])
    causal = False
    if m.captures["mask"] is not None:
        mv = const_value(m.captures["mask"], max_ops=16)
        if mv is None:
            return Check.reject("additive mask is not a constant")
        add_out = m.captures["mask_add"].outputs[0]
        data_in = next(i for i in m.captures["mask_add"].inputs if i is not m.captures["mask"])
        if add_out.numel != data_in.numel:
            return Check.reject("mask broadcast enlarges the scores")
        kind = _causal_kind(mv, tuple(add_out.shape or ()), sq, sk)
        if kind is None:
            return Check.reject("additive mask is not causal (only causal or all-zero masks fuse)")
        causal = kind == "causal"
    qs = _head_splits(q_t, b, sq, d, q_tr)
    ks = _head_splits(k_t, b, sk, d, k_tr)
    vs = _head_splits(v_t, b, sk, d, v_tr)
    outs = _head_merges(sg, out, b, sq, d, set(qs) & set(ks) & set(vs))
    common = sorted(outs, reverse=True)
    if not common:
        return Check.reject("no consistent head layout for Q/K/V/output")
    h = common[0]
    q, k, v = qs[h], ks[h], vs[h]
    scale *= q.chain.scale * k.chain.scale
    if v.chain.scale != 1.0:
        return Check.reject("V is scaled")
    if not np.isfinite(scale) or scale <= 0:
        return Check.reject(f"scale {scale} is not positive")
    o_t, o_ops = outs[h]
    return Check.accept(_Plan(q, k, v, o_t, o_ops, b // h, h, d, sq, sk, scale, causal))


# --- rewrite -----------------------------------------------------------------------------------------------------


def _operand(sg: Any, s: _Split, seq: int, before: Op) -> Tensor:
    x = s.chain.root
    if s.perm is not None:
        x = transpose(sg, x, s.perm, before=before)
    shape = (s.n, seq, s.channels)
    if tuple(x.shape or ()) != shape:
        x = reshape(sg, x, shape, before=before)
    return x


def _rewrite(ctx: Context, m: Match, p: _Plan) -> FusedOp:
    sg = ctx.sg
    requested = ctx.options.get("attention_variant", "auto")
    if requested == "auto":
        variant = choose_attention_variant(
            p.seq_q,
            p.seq_k,
            p.head_dim,
            scores_budget=ctx.options.get("flash_scores_bytes", SCORES_BUDGET_BYTES),
            flash_max_head_dim=ctx.options.get("flash_max_head_dim", FLASH_MAX_HEAD_DIM),
        )
    else:
        variant = requested
    attrs = AttentionAttrs(
        heads=p.heads, head_dim=p.head_dim, scale=float(np.float32(p.scale)), causal=p.causal, variant=variant
    )
    spec = sdops.get("SdAttention")
    c = p.heads * p.head_dim
    refs = []

    def build(before: Op, y: Tensor) -> None:
        q = _operand(sg, p.q, p.seq_q, before)
        k = _operand(sg, p.k, p.seq_k, before)
        v = _operand(sg, p.v, p.seq_k, before)
        custom_op(sg, spec, attrs, [q, k, v], y, before=before)

    for s, seq in ((p.q, p.seq_q), (p.k, p.seq_k), (p.v, p.seq_k)):
        refs.append(ref(s.chain.root, (s.n, seq, s.channels), s.perm))
    emit_to(sg, p.out, (p.n, p.seq_q, c), build)
    replaced = len(m.ops) + len(p.out_ops) + sum(len(s.chain.ops) for s in (p.q, p.k, p.v))
    return FusedOp(
        "attention",
        m.alternative,
        spec.name,
        {**attrs.__dict__},
        ctx.sg_index,
        refs,
        ref(p.out, (p.n, p.seq_q, c)),
        replaced,
    )


def _only(qk_type: str) -> Any:
    def pattern(ctx: Context, op: Op) -> Match | None:
        m = _pattern(ctx, op)
        return m if m is not None and m.captures["qk"].type == qk_type else None

    return pattern


RULE = Rule(
    "attention",
    (
        Alternative("qk_batch_matmul", frozenset({"SOFTMAX"}), _only("BATCH_MATMUL"), _check, _rewrite),
        Alternative("qk_fully_connected", frozenset({"SOFTMAX"}), _only("FULLY_CONNECTED"), _check, _rewrite),
    ),
    __doc__ or "",
)

__all__ = ["RULE", "choose_attention_variant"]
