"""GroupNorm (+ optional SiLU) -> ``SdGroupNorm``; and, for ``--target litert``, a broadcast-free stock-op form.

What litert-torch emits for ``nn.GroupNorm`` on NCHW activations (after its layout pass, between NHWC convs):
``TRANSPOSE(nhwc->nchw) -> RESHAPE [N,G,C/G,HW] -> MEAN -> SUB -> MUL(d,d) -> MEAN -> ADD eps -> RSQRT``, then the
normalisation applied as an affine map of the *input*: ``x * A + B`` with ``A = rsqrt·γ``, ``B = β - mean·rsqrt·γ``
broadcast per channel (``BROADCAST_TO [N,G,C/G,1] -> RESHAPE [N,C,1,1]`` when C/G > 1, plain broadcasting when
C/G == 1), then ``TRANSPOSE(nchw->nhwc)`` and the SiLU ``x * LOGISTIC(x)`` of the ResNet block. γ=1/β=0 (random
init) are folded away entirely; real weights appear as extra MULs/ADDs or folded into A/B. The
``odml.group_norm`` composite (``ENABLE_GROUP_NORM_COMPOSITE=y``) has γ/β as explicit inputs.

Matching is therefore semantic rather than op-by-op. Pattern (anchor ``MEAN``): the mean of a RESHAPE of a rank-3/4
tensor X into a grouped view (channels-first [N,G,...] reduced over all but N,G; or channels-last [N,L,G,C/G]
reduced over L and C/G). Check: the first tensor Y after it whose backward slice from X (plus constants) contains the
statistics and has no other exits is the normalised output; per-channel affine ops that follow are absorbed; the
region is evaluated in float64 on random inputs and γ, β are *fitted* per channel (:func:`verify_norm`) -- a
residual above 1e-6 rejects the site. That covers every sign/folding variant without enumerating them. Transposes
around the region (NHWC->NCHW->NHWC) are dropped in favour of ``channel_axis=-1`` on the NHWC tensor, and a
following SiLU becomes ``activation="silu"``.

The numeric check runs the region on full-size activations (the SD1.5 VAE decoder's GroupNorms reach 512x512x256,
537 MB per float64 tensor; 30 sites), so it is built for cost; the previous form (two full samples of Gaussian noise,
outputs and a materialised reference concatenated, a least-squares fit over transposed copies) took 66-107 s and
8.2 GB on that decoder, this one 10-16 s and 1.3 GB (SD1.5 UNet, 61 GroupNorms + 48 LayerNorms timed on single
blocks: 13-18 s -> ~2 s; ranges: machine load):

- Instances, not samples: what the fit needs is instances (batch entries) in two regimes, a *wide* one (per-channel
  offsets: group statistics mix channels, so the grouping is observable) and a *narrow* one (variance ~1.3 eps:
  eps is observable). Batch 1 -> two samples, batch 2 (the UNet's CFG batch) -> one; LayerNorm rows are instances,
  so >= 16 rows -> one sample. The narrow regime verifies eps far more strongly than the old "small noise on
  per-channel offsets" sample (an eps the region adds twice: residual 7e-2 instead of 1.8e-6 against 1e-6).
- The reference is never materialised (several positions per channel): x = p + q·u with u ~ U[0, 1) in float32
  (cheap to draw; the region still runs in float64, which its 1e-6 tolerance needs), so the reference is exactly a
  line in u per (instance, channel) from sums of u and u². The region output gets its least-squares line in u and
  its max deviation rho; γ, β are fitted on the lines' ends, and ``rho + |line error at the ends|`` bounds the
  residual at every element. Trade-off: the residual is a rigorous upper bound rather than the exact max (measured
  within 4x of it on near misses; true GroupNorms come out at ~1e-13, far from the tolerance either way).
- ~8 passes over float32/float64 arrays per element and sample besides the region; buffers recycled across
  samples and elementwise ops run in place (:class:`~sdconvert.graph.evaluate.Scratch`, :func:`evaluate_region`):
  peak 3.5x one float64 activation. A fresh 537 MB array costs more in page faults than several passes over it.
- Not done: caching checks across structurally identical sites. It would only pay on random-init models (identical
  sites); real checkpoints give every site its own γ/β, and "identical except γ/β" is what the check itself
  establishes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from flatbuffers import flexbuffers

from ... import ops as sdops
from ...graph.evaluate import Scratch, Unsupported, evaluate_region
from ...graph.ir import Op, Subgraph, Tensor
from ...ops.group_norm import GroupNormAttrs
from ..edit import custom_op, emit_to, take_output, transpose
from ..engine import Alternative, Check, Context, FusedOp, Match, Rule, ref
from ..match import (
    FLOAT32,
    activation,
    backward_slice,
    const_value,
    is_single_exit,
    perm,
    scalar,
    silu_after,
    sole_consumer,
)

FIT_TOLERANCE = 1e-6


def _axes(op: Op, rank: int) -> set[int] | None:
    v = const_value(op.inputs[1], max_ops=0) if len(op.inputs) > 1 else None
    return None if v is None else {int(a) % rank for a in np.asarray(v).reshape(-1)}


def _pattern(ctx: Context, mean: Op) -> Match | None:
    r = mean.inputs[0]
    rop = r.producer if r is not None else None
    if rop is None or rop.type != "RESHAPE" or r.shape is None:
        return None
    x = rop.inputs[0]
    if x is None or x.shape is None or len(x.shape) not in (3, 4) or x.dtype != FLOAT32 or x.numel != r.numel:
        return None
    axes = _axes(mean, len(r.shape))
    if axes is None:
        return None
    n, c = x.shape[0], x.shape[1]
    if (
        len(r.shape) >= 3
        and r.shape[0] == n
        and axes == set(range(2, len(r.shape)))
        and 1 <= r.shape[1] <= c
        and c % r.shape[1] == 0
    ):
        return Match("decomposed", mean, [rop, mean], dict(x=x, groups=int(r.shape[1]), channel_axis=1))
    cl = x.shape[-1]
    if (
        len(r.shape) == 4
        and r.shape[0] == n
        and axes == {1, 3}
        and r.shape[2] * r.shape[3] == cl
        and r.shape[1] == x.numel // (n * cl)
    ):
        return Match("decomposed", mean, [rop, mean], dict(x=x, groups=int(r.shape[2]), channel_axis=-1))
    return None


@dataclass
class _Plan:
    x_in: Tensor
    out: Tensor
    gamma: np.ndarray
    beta: np.ndarray
    groups: int
    eps: float
    activation: str
    channel_axis: int
    replaced: int
    region: list[Op]
    has_broadcast: bool
    post_perm: tuple[int, ...] | None = None  # a TRANSPOSE kept after the op (SiLU folded across it)
    fit_residual: float | None = None  # verify_norm's residual (None: a composite, nothing fitted)


MIN_FIT_INSTANCES = 16  # instances a channel is fitted over when it has one position per instance (LayerNorm rows)
WIDE_WIDTH = 4.0  # "wide" instances: uniform noise of this width (std 1.15) on N(0, 1) offsets


@dataclass(frozen=True)
class NormLayout:
    """A normalised tensor as instances x channels x positions: ``[N, C, L]`` (channels first) or ``[N, L, C]``.

    GroupNorm: N = batch, statistics per (instance, group of C/G channels) over L positions. LayerNorm over the last
    axis of ``[..., C]`` is ``[R, 1, C]`` with one group: each row is an instance with a single position.
    """

    n: int
    c: int
    l: int  # noqa: E741 - the positions axis, as in the shapes above
    channels_last: bool

    @staticmethod
    def of(shape: tuple[int, ...], channel_axis: int) -> NormLayout:
        n, numel = int(shape[0]), math.prod(shape)
        c = int(shape[1] if channel_axis == 1 else shape[-1])
        return NormLayout(n, c, numel // (n * c), channel_axis != 1)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.n, self.l, self.c) if self.channels_last else (self.n, self.c, self.l)

    @property
    def positions(self) -> int:
        """The axis of :attr:`shape` that holds the positions."""
        return 1 if self.channels_last else 2

    def expand(self, a: np.ndarray) -> np.ndarray:
        """A per (instance, channel) ``[N, C]`` (or ``[N, 1]``) array, broadcastable against :attr:`shape`."""
        return a[:, None, :] if self.channels_last else a[:, :, None]

    @property
    def samples(self) -> int:
        """Samples to evaluate: >= 2 instances (one wide, one narrow), >= MIN_FIT_INSTANCES with one position each."""
        need = 2 if self.l > 1 else MIN_FIT_INSTANCES
        return -(-need // self.n)


@dataclass
class NormFit:
    """The per-channel affine map of a verified normalisation and how well the region follows it."""

    gamma: np.ndarray
    beta: np.ndarray
    resid: float  # >= max |region - (gamma * norm(x) + beta)| / max(1, max |region|) over every sample
    samples: int


@dataclass
class _Sample:
    """x = p + q * u: u ~ U[0, 1) per element (float32), p per (instance, channel) [N, C] or per instance [N, 1],
    q per instance [N]."""

    u: np.ndarray
    x: np.ndarray
    p: np.ndarray
    q: np.ndarray


def _sample(rng: np.random.Generator, lay: NormLayout, groups: int, eps: float, first: int, sc: Scratch) -> _Sample:
    """One random input with two per-instance regimes, alternating from instance ``first`` on. Wide instances:
    q = WIDE_WIDTH and, with several positions per channel, one offset per channel, so that group statistics mix
    channels and the grouping is observable. Narrow instances: q = 4 sqrt(eps) and one offset per group, so that the
    group variance is ~1.3 eps and eps is observable (the GroupNorm of a wide instance hardly depends on eps)."""
    n, c = lay.n, lay.c
    wide = (first + np.arange(n)) % 2 == 0
    q = np.where(wide, WIDE_WIDTH, 4.0 * math.sqrt(eps) if eps > 0 else 4e-3)
    if lay.l > 1:
        per_channel = rng.standard_normal((n, c))
        per_group = np.repeat(rng.standard_normal((n, groups)), c // groups, axis=1)
        p = np.where(wide[:, None], per_channel, per_group) - q[:, None] / 2
    else:  # one position per channel: u already differs per channel; one offset per group
        p = rng.standard_normal((n, groups))
        p = (np.repeat(p, c // groups, axis=1) if groups > 1 else p) - q[:, None] / 2
    u = sc.take(lay.shape, np.float32)
    rng.random(dtype=np.float32, out=u)
    x = sc.take(lay.shape, np.float64)
    np.multiply(u, q[:, None, None], out=x)
    np.add(x, lay.expand(p), out=x)
    return _Sample(u, x, p, q)


@dataclass
class _Lines:
    """Per (instance, channel) of one sample: the region output is within ``rho`` of the line ``alpha u + b0`` and the
    reference normalisation is exactly ``a u + b`` (u in [0, 1))."""

    alpha: np.ndarray
    b0: np.ndarray
    rho: np.ndarray
    a: np.ndarray
    b: np.ndarray


def _lines(s: _Sample, y: np.ndarray, lay: NormLayout, groups: int, eps: float, sc: Scratch) -> _Lines:
    """The region output's least-squares line in u per (instance, channel) and its max deviation (one pass over y
    for the deviation, four reductions), and the reference's line from group statistics of x, which follow exactly
    from per-channel sums of u and u^2 (x = p + q u is affine in u)."""
    n, c, l, ax = lay.n, lay.c, lay.l, lay.positions
    sub = "nlc,nlc->nc" if lay.channels_last else "ncl,ncl->nc"
    ub = s.u.sum(axis=ax, dtype=np.float64) / l
    vu = np.maximum(np.einsum(sub, s.u, s.u, dtype=np.float64) / l - ub * ub, 0.0)  # u in [0, 1): no cancellation
    yb = y.sum(axis=ax) / l
    alpha = (np.einsum(sub, s.u, y) / l - ub * yb) / np.where(vu > 0, vu, 1.0)
    b0 = yb - alpha * ub
    # x is not needed any more: its buffer holds y - alpha u, within b0 +- rho
    t = s.x if not np.may_share_memory(s.x, y) else sc.take(lay.shape)
    np.multiply(s.u, lay.expand(alpha), out=t)
    np.subtract(y, t, out=t)
    rho = np.maximum(t.max(axis=ax) - b0, b0 - t.min(axis=ax))
    sc.give(t)  # (x's buffer: verify_norm hands it back too, the Scratch keeps it once)
    cg = c // groups
    q = s.q[:, None, None]
    mc = (s.p + s.q[:, None] * ub).reshape(n, groups, cg)  # channel means of x
    mg = mc.mean(axis=2, keepdims=True)
    r = 1.0 / np.sqrt((q * q * vu.reshape(n, groups, cg) + (mc - mg) ** 2).mean(axis=2, keepdims=True) + eps)
    a = np.broadcast_to(q * r, (n, groups, cg)).reshape(n, c)
    b = ((s.p.reshape(n, groups, cg) - mg) * r).reshape(n, c)
    return _Lines(alpha, b0, rho, a, b)


def _fit_lines(parts: list[_Lines]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """gamma/beta per channel by least squares over both ends (u = 0, 1) of every instance's lines, and the bound
    ``rho + max(|error(0)|, |error(1)|)`` per (instance, channel): the error of an affine map is largest at an end,
    so it bounds |region - (gamma * reference + beta)| at every element."""
    f = {k: np.concatenate([getattr(p, k) for p in parts]) for k in ("alpha", "b0", "rho", "a", "b")}
    ys = np.stack([f["b0"], f["alpha"] + f["b0"]])  # [2, instances, C]
    xs = np.stack([f["b"], f["a"] + f["b"]])
    xm, ym = xs.mean(axis=(0, 1)), ys.mean(axis=(0, 1))
    var = ((xs - xm) ** 2).sum(axis=(0, 1))
    gamma = ((xs - xm) * (ys - ym)).sum(axis=(0, 1)) / np.where(var > 0, var, 1.0)
    beta = ym - gamma * xm
    return gamma, beta, f["rho"] + np.abs(ys - (gamma * xs + beta)).max(axis=0)


def _fit_rows(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, float]:
    """One position per channel (LayerNorm rows): least squares over the instances of per-channel sums of the
    materialised reference ``nrm`` and ``y`` ([instances, C] each), then the exact max residual (in ``nrm``)."""
    k = sum(len(nrm) for nrm, _ in parts)
    sn = sum(nrm.sum(axis=0) for nrm, _ in parts)
    sy = sum(y.sum(axis=0) for _, y in parts)
    snn = sum(np.einsum("rc,rc->c", nrm, nrm) for nrm, _ in parts)
    sny = sum(np.einsum("rc,rc->c", nrm, y) for nrm, y in parts)
    var = snn - sn * sn / k
    gamma = (sny - sn * sy / k) / np.where(var > 0, var, 1.0)
    beta = (sy - gamma * sn) / k
    resid = []
    for nrm, y in parts:
        np.multiply(nrm, gamma, out=nrm)
        np.add(nrm, beta, out=nrm)
        np.subtract(nrm, y, out=nrm)
        resid.append(np.abs(nrm, out=nrm).max())
    return gamma, beta, float(np.max(resid))  # NaN stays NaN (a rejection)


def _row_norm(x: np.ndarray, groups: int, eps: float) -> np.ndarray:
    """The reference GroupNorm of ``x`` [R, C] (one position per channel: statistics over each row's C/G-channel
    groups), computed in place."""
    g = x.reshape(len(x), groups, -1)
    np.subtract(g, g.mean(axis=2, keepdims=True), out=g)
    var = np.einsum("rgc,rgc->rg", g, g) / g.shape[2]
    np.multiply(g, (1.0 / np.sqrt(var + eps))[:, :, None], out=g)
    return x


def verify_norm(
    ops: list[Op], x: Tensor, out: Tensor, lay: NormLayout, groups: int, eps: float, *, seed: int = 0
) -> NormFit:
    """Evaluate the region ``ops`` (x -> out, same element order) on random samples and fit
    ``out = gamma * GroupNorm(x; groups, eps) + beta`` per channel; raises what :func:`evaluate_region` raises.

    Several positions per channel and instance (GroupNorm): the reference is never materialised. The input is
    x = p + q u per (instance, channel) (see :func:`_sample`), so the reference normalisation is *exactly* a line in
    u there; the region output gets its least-squares line in u and its max deviation from it, and gamma/beta are
    fitted on the lines (:func:`_fit_lines`). The residual is a rigorous bound, never below the true max
    residual. Cost per element and sample: the region, u, x, and ~8 passes over float32/float64 arrays, nearly
    all in recycled buffers (:class:`Scratch`).

    One position (LayerNorm rows [R, 1, C]): the reference is materialised in x's buffer and the fit and the
    residual are exact (:func:`_fit_rows`).
    """
    rng = np.random.default_rng(seed)
    sc = Scratch()
    lines: list[_Lines] = []
    rows: list[tuple[np.ndarray, np.ndarray]] = []
    ymax = 0.0
    for j in range(lay.samples):
        s = _sample(rng, lay, groups, eps, j * lay.n, sc)
        (y,) = evaluate_region(ops, {id(x): s.x.reshape(x.shape or ())}, [out], scratch=sc)
        y = np.reshape(y, lay.shape)
        ymax = float(np.max([ymax, np.abs(y.max()), np.abs(y.min())]))  # NaN propagates
        if lay.l > 1:
            lines.append(_lines(s, y, lay, groups, eps, sc))
            sc.give(s.u, s.x, y)
        else:
            nrm = s.x if not np.may_share_memory(s.x, y) else s.x.copy()
            rows.append((_row_norm(nrm.reshape(lay.n, lay.c), groups, eps), y.reshape(lay.n, lay.c)))
            sc.give(s.u)
    if lines:
        gamma, beta, bound = _fit_lines(lines)
        resid = float(bound.max())
    else:
        gamma, beta, resid = _fit_rows(rows)
    resid = resid / max(1.0, ymax) if math.isfinite(resid) and math.isfinite(ymax) else math.inf  # NaN/inf: reject
    return NormFit(gamma, beta, resid, lay.samples)


def _eps(region: list[Op]) -> float:
    for op in region:
        if op.type in ("RSQRT", "SQRT"):
            t = op.inputs[0]
            for _ in range(4):
                p = t.producer if t is not None else None
                if p is None:
                    break
                if p.type == "RESHAPE":
                    t = p.inputs[0]
                    continue
                if p.type == "ADD":
                    for a in p.inputs:
                        s = scalar(a)
                        if s is not None:
                            return s
                break
    return 0.0


def _post(
    sg: Subgraph, x: Tensor, out: Tensor, channel_axis: int, region: list[Op]
) -> tuple[Tensor, Tensor, int, str, list[Op], tuple[int, ...] | None]:
    """Fold surrounding NHWC<->NCHW transposes and a following SiLU (also across a TRANSPOSE); pick the input."""
    extra: list[Op] = []
    x_in = x
    if channel_axis == 1 and len(x.shape or ()) == 4 and out.shape == x.shape:
        xp = x.producer
        c = sole_consumer(sg, out)
        if (
            xp is not None
            and xp.type == "TRANSPOSE"
            and perm(xp) == (0, 3, 1, 2)
            and c is not None
            and c.type == "TRANSPOSE"
            and perm(c) == (0, 2, 3, 1)
        ):
            x_in, channel_axis, out = xp.inputs[0], -1, c.outputs[0]
            extra.append(c)
    act = "none"
    post_perm = None
    s = silu_after(sg, out)
    if s is not None:
        act, out = "silu", s[1]
        extra += s[0]
    else:
        c = sole_consumer(sg, out)
        if c is not None and c.type == "TRANSPOSE" and perm(c) is not None and out.shape == x_in.shape:
            s = silu_after(sg, c.outputs[0])
            if s is not None:
                act, out, post_perm = "silu", s[1], perm(c)
                extra += [c, *s[0]]
                return x_in, out, channel_axis, act, extra, post_perm
    if channel_axis == 1 and out.shape != x_in.shape:
        for op in region:
            o = op.outputs[0]
            if (
                op.type == "RESHAPE"
                and op.inputs[0] is x
                and o.shape == out.shape
                and (o.shape or ())[:2] == (x.shape or ())[:2]
            ):
                x_in = o
                break
    return x_in, out, channel_axis, act, extra, post_perm


_NORMALISERS = frozenset({"RSQRT", "SQRT", "DIV"})


def _normalised_core(ctx: Context, mean: Op, x: Tensor) -> tuple[Tensor, list[Op]] | str | None:
    """The first tensor after ``mean`` (x-sized, fp32) computed from x through ``mean`` and a normaliser
    (RSQRT / SQRT / DIV) whose region is single-exit, with that region; a reason when such tensors exist but the
    statistics leak out of every region; None: no variance step. Shared by the GroupNorm and LayerNorm rules."""
    sg = ctx.sg
    start = ctx.pos(mean)
    normalised = False
    for op in sg.ops[start + 1 : start + 48]:
        if len(op.outputs) != 1:
            continue
        t = op.outputs[0]
        if t.numel != x.numel or t.dtype != FLOAT32:
            continue
        sl = backward_slice(t, [x], max_ops=48)
        if sl is None or not any(o is mean for o in sl) or not any(o.type in _NORMALISERS for o in sl):
            continue
        normalised = True
        if is_single_exit(sg, sl, t):
            return t, sl
    return "an intermediate of the statistics is used outside the normalisation" if normalised else None


def _affine_tail(ctx: Context, t: Tensor, sl: list[Op], numel: int) -> list[tuple[Tensor, list[Op]]]:
    """Candidate exits: t, then t through each following MUL/ADD/SUB/DIV by a constant or RESHAPE (longest last)."""
    sg = ctx.sg
    exits = [(t, list(sl))]
    cur, ext = t, []
    for _ in range(6):
        c = sole_consumer(sg, cur)
        if c is None or activation(c):
            break
        if c.type in ("MUL", "ADD", "SUB", "DIV") and len(c.inputs) == 2:
            other = c.inputs[1] if c.inputs[0] is cur else c.inputs[0]
            if other is cur or other is None or const_value(other) is None or (c.type == "DIV" and c.inputs[1] is cur):
                break
        elif c.type != "RESHAPE":
            break
        nxt = c.outputs[0]
        if nxt.numel != numel:
            break
        ext.append(c)
        cur = nxt
        exits.append((cur, sl + ext))
    return exits


def _check_decomposed(ctx: Context, m: Match) -> Check:
    sg = ctx.sg
    x: Tensor = m.captures["x"]
    groups, axis = m.captures["groups"], m.captures["channel_axis"]
    core = _normalised_core(ctx, m.anchor, x)
    if core is None or isinstance(core, str):
        return Check.reject("no single-exit region after the group statistics")
    t, sl = core
    exits = _affine_tail(ctx, t, sl, x.numel)
    region = sorted(exits[-1][1], key=ctx.pos)
    eps = _eps(region)
    lay = NormLayout.of(tuple(x.shape or ()), axis)
    resid = math.inf
    for i in range(len(exits) - 1, -1, -1):  # the longest region first: it absorbs the most affine ops
        out, ops = exits[i]
        ops = sorted(ops, key=ctx.pos)
        try:
            fit = verify_norm(ops, x, out, lay, groups, eps)
        except (Unsupported, ValueError, IndexError, TypeError) as e:
            return Check.reject(f"cannot evaluate region: {e}")
        resid = fit.resid
        if resid <= FIT_TOLERANCE:
            x_in, out, ca, act, extra, post_perm = _post(sg, x, out, axis, ops)
            return Check.accept(
                _Plan(
                    x_in,
                    out,
                    fit.gamma,
                    fit.beta,
                    groups,
                    float(eps),
                    act,
                    ca,
                    len(ops) + len(extra),
                    ops,
                    any(o.type == "BROADCAST_TO" for o in ops),
                    post_perm,
                    resid,
                )
            )
    return Check.reject(f"region is not a GroupNorm(groups={groups}, eps={eps:g}) (fit residual {resid:.1e})")


def _composite_pattern(ctx: Context, op: Op) -> Match | None:
    o2 = op.options2
    name = getattr(o2, "name", None)
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    if name != "odml.group_norm" or len(op.inputs) != 3 or len(op.outputs) != 1:
        return None
    return Match("odml_composite", op, [op], {})


def _check_composite(ctx: Context, m: Match) -> Check:
    op = m.anchor
    try:
        attrs = flexbuffers.Loads(bytes(op.options2.compositeAttributes))
        groups, eps, ca = int(attrs["num_groups"]), float(attrs["epsilon"]), int(attrs["channel_axis"])
    except Exception as e:  # noqa: BLE001 - malformed attributes are a rejection, not a crash
        return Check.reject(f"unreadable composite attributes ({type(e).__name__})")
    x = op.inputs[0]
    if x is None or x.shape is None or len(x.shape) not in (3, 4) or x.dtype != FLOAT32:
        return Check.reject("input is not a float32 rank-3/4 tensor")
    rank = len(x.shape)
    ca = ca % rank
    if ca not in (1, rank - 1):
        return Check.reject(f"channel_axis {ca} is neither 1 nor last")
    c = x.shape[ca]
    gamma, beta = const_value(op.inputs[1]), const_value(op.inputs[2])
    if gamma is None or beta is None or gamma.size != c or beta.size != c:
        return Check.reject("gamma/beta are not constant [C] vectors")
    if groups < 1 or c % groups:
        return Check.reject(f"{c} channels not divisible by {groups} groups")
    out = op.outputs[0]
    act = "none"
    s = silu_after(ctx.sg, out)
    if s is not None:
        act, out = "silu", s[1]
    return Check.accept(
        _Plan(
            x,
            out,
            gamma.reshape(-1),
            beta.reshape(-1),
            groups,
            eps,
            act,
            1 if ca == 1 else -1,
            1 + (2 if s else 0),
            [op],
            False,
        )
    )


def _record(ctx: Context, m: Match, p: _Plan, attrs: GroupNormAttrs, op_type: str, rule: str) -> FusedOp:
    inv = tuple(int(i) for i in np.argsort(p.post_perm)) if p.post_perm is not None else None
    return FusedOp(
        rule,
        m.alternative,
        op_type,
        {**attrs.__dict__},
        ctx.sg_index,
        [
            ref(p.x_in),
            ref(p.x_in, (len(p.gamma),), value=p.gamma.astype(np.float32)),
            ref(p.x_in, (len(p.beta),), value=p.beta.astype(np.float32)),
        ],
        ref(p.out, p.x_in.shape, perm=inv),
        p.replaced,
        p.fit_residual,
    )


def _rewrite(ctx: Context, m: Match, p: _Plan) -> FusedOp:
    sg = ctx.sg
    attrs = GroupNormAttrs(
        groups=p.groups, eps=float(np.float32(p.eps)), activation=p.activation, channel_axis=p.channel_axis
    )
    spec = sdops.get("SdGroupNorm")
    g = sg.new_constant("gamma", p.gamma.astype(np.float32))
    b = sg.new_constant("beta", p.beta.astype(np.float32))
    if p.post_perm is None:
        emit_to(
            sg,
            p.out,
            p.x_in.shape or (),
            lambda before, y: custom_op(sg, spec, attrs, [p.x_in, g, b], y, before=before),
        )
    else:
        old = take_output(sg, p.out)
        assert old is not None
        tmp = sg.new_tensor(p.out.name + ";gn", p.x_in.shape or ())
        custom_op(sg, spec, attrs, [p.x_in, g, b], tmp, before=old)
        transpose(sg, tmp, p.post_perm, before=old, out=p.out)
    rec = _record(ctx, m, p, attrs, spec.name, "group_norm")
    rec.inputs[1] = ref(g, value=p.gamma.astype(np.float32))
    rec.inputs[2] = ref(b, value=p.beta.astype(np.float32))
    return rec


RULE = Rule(
    "group_norm",
    (
        Alternative(
            "odml_composite", frozenset({"STABLEHLO_COMPOSITE"}), _composite_pattern, _check_composite, _rewrite
        ),
        Alternative("decomposed", frozenset({"MEAN"}), _pattern, _check_decomposed, _rewrite),
    ),
    __doc__ or "",
)

__all__ = ["RULE"]
