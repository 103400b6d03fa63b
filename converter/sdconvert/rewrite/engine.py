"""Rule engine: anchored patterns, checks that explain rejections, rewrites, run to a fixed point.

A :class:`Rule` is one fusion (``attention``, ``gelu``, ``group_norm``). It has one or more :class:`Alternative`
patterns (graph variants of the same computation: ``FULLY_CONNECTED`` vs ``BATCH_MATMUL`` for Q·Kᵀ, builtin GELU vs
its tanh chain, ...). Every alternative has

- ``pattern(ctx, op) -> Match | None``: cheap structural match anchored at one op (``None`` = not this shape at all;
  silent, because almost every op is not an attention);
- ``check(ctx, match) -> Check``: the semantic conditions (shapes, constants, single use, numeric verification);
  a rejected check carries a one-line reason that ends up in the report, so a user can see *why* a site that looks
  like attention was left alone;
- ``rewrite(ctx, match, plan) -> FusedOp``: edits the graph (new ops produce the matched output tensor itself, so
  names, signatures and subgraph outputs stay valid; what becomes dead is removed by the cleanup after each sweep).

:func:`run_rules` sweeps all rules over all executed subgraphs until nothing changes (a fixed point) and returns
``{rule_name: count}`` plus the records of every rewrite and the rejection summary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..graph.ir import Model, Op, Subgraph, Tensor

MAX_SWEEPS = 8


@dataclass
class Match:
    """What a pattern found: the anchor, the ops it spans and named captures for check/rewrite."""

    alternative: str
    anchor: Op
    ops: list[Op]
    captures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    """Result of a rule's check: ``ok`` with a ``plan`` for the rewrite, or a rejection ``reason``."""

    ok: bool
    reason: str = ""
    plan: Any = None
    silent: bool = False  # a rejection that is not worth reporting (e.g. "nothing to do here")

    @staticmethod
    def accept(plan: Any = None) -> Check:
        return Check(True, "", plan)

    @staticmethod
    def reject(reason: str, *, silent: bool = False) -> Check:
        return Check(False, reason, None, silent)


@dataclass(frozen=True)
class TensorRef:
    """Where a fused op's operand came from in the model as read (for reports and semantic checks).

    ``value`` of the source tensor (``source_index`` in subgraph ``subgraph``, ``None`` for tensors the rewrite
    created), transposed by ``perm`` if given, then reshaped to ``shape`` is exactly what the fused op sees.
    New constants (GroupNorm's gamma/beta) carry their ``value``.
    """

    name: str
    source_index: int | None
    shape: tuple[int, ...]
    perm: tuple[int, ...] | None = None
    value: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "source_index": self.source_index, "shape": list(self.shape)}
        if self.perm is not None:
            d["perm"] = list(self.perm)
        if self.value is not None:
            d["constant"] = True
        return d


def ref(
    t: Tensor, shape: Sequence[int] | None = None, perm: Sequence[int] | None = None, value: np.ndarray | None = None
) -> TensorRef:
    return TensorRef(
        t.name,
        t.source_index,
        tuple(shape if shape is not None else (t.shape or ())),
        tuple(perm) if perm is not None else None,
        value,
    )


@dataclass
class FusedOp:
    """One rewrite: which rule/alternative produced which custom op with which attrs, from which tensors."""

    rule: str
    alternative: str
    op_type: str
    attrs: dict[str, Any]
    subgraph: int
    inputs: list[TensorRef]
    output: TensorRef
    replaced_ops: int
    # the rule's own numeric check of the region it replaced, where it has one (GroupNorm / LayerNorm: the max
    # residual of the fitted gamma * norm(x) + beta against the region on random inputs, relative to max(1, |out|))
    fit_residual: float | None = None

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {} if self.fit_residual is None else {"fit_residual": self.fit_residual}
        return {
            "rule": self.rule,
            "alternative": self.alternative,
            "op": self.op_type,
            "attrs": self.attrs,
            "subgraph": self.subgraph,
            "inputs": [r.to_dict() for r in self.inputs],
            "output": self.output.to_dict(),
            "replaced_ops": self.replaced_ops,
            **extra,
        }


class Context:
    """Per-run state handed to patterns/checks/rewrites: the model, the current subgraph, options, op positions."""

    def __init__(self, model: Model, options: dict[str, Any] | None = None) -> None:
        self.model = model
        self.options: dict[str, Any] = dict(options or {})
        self.sg: Subgraph = model.main
        self.sg_index = 0
        self._pos: dict[int, int] | None = None

    def enter(self, sg: Subgraph, index: int) -> None:
        self.sg, self.sg_index, self._pos = sg, index, None

    def invalidate(self) -> None:
        self._pos = None

    def pos(self, op: Op) -> int:
        """Position of ``op`` in the current subgraph's (topologically ordered) op list."""
        if self._pos is None:
            self._pos = {id(o): i for i, o in enumerate(self.sg.ops)}
        return self._pos.get(id(op), -1)

    def alive(self, op: Op) -> bool:
        return self.pos(op) >= 0


PatternFn = Callable[[Context, Op], "Match | None"]
CheckFn = Callable[[Context, Match], Check]
RewriteFn = Callable[[Context, Match, Any], FusedOp]


@dataclass(frozen=True)
class Alternative:
    name: str
    anchors: frozenset[str]
    pattern: PatternFn
    check: CheckFn
    rewrite: RewriteFn


@dataclass(frozen=True)
class Rule:
    name: str
    alternatives: tuple[Alternative, ...]
    doc: str = ""


@dataclass
class RunResult:
    counts: dict[str, int]
    by_alternative: dict[str, int]
    fused: list[FusedOp]
    rejections: dict[str, dict[str, int]]  # rule -> reason -> number of sites
    sweeps: int


def executed_subgraphs(model: Model) -> list[tuple[int, Subgraph]]:
    """Subgraphs to rewrite: all but composite decompositions (those run only as the body of their composite op)."""
    decomp = {
        id(sg) for _, op in model.iter_ops() if op.type == "STABLEHLO_COMPOSITE" for sg in op.subgraph_refs.values()
    }
    return [(i, sg) for i, sg in enumerate(model.subgraphs) if id(sg) not in decomp]


def run_rules(
    model: Model, rules: Iterable[Rule], options: dict[str, Any] | None = None, *, max_sweeps: int = MAX_SWEEPS
) -> RunResult:
    """Apply ``rules`` until a sweep changes nothing. Dead ops are removed after every rule sweep."""
    rules = list(rules)
    ctx = Context(model, options)
    counts: Counter[str] = Counter({r.name: 0 for r in rules})
    by_alt: Counter[str] = Counter()
    fused: list[FusedOp] = []
    last_reject: dict[tuple[str, int], tuple[Op, str]] = {}
    sweeps = 0
    changed = True
    while changed and sweeps < max_sweeps:
        changed = False
        sweeps += 1
        for rule in rules:
            for gi, sg in executed_subgraphs(model):
                ctx.enter(sg, gi)
                for op in list(sg.ops):
                    if not ctx.alive(op):
                        continue
                    for alt in rule.alternatives:
                        if op.type not in alt.anchors:
                            continue
                        m = alt.pattern(ctx, op)
                        if m is None:
                            continue
                        res = alt.check(ctx, m)
                        key = (rule.name, op.uid)
                        if not res.ok:
                            if not res.silent:
                                last_reject[key] = (op, f"{alt.name}: {res.reason}")
                            continue
                        last_reject.pop(key, None)
                        rec = alt.rewrite(ctx, m, res.plan)
                        ctx.invalidate()
                        fused.append(rec)
                        counts[rule.name] += 1
                        by_alt[f"{rule.name}/{alt.name}"] += 1
                        changed = True
                        break
            # drop dead ops, and subgraphs (composite decompositions) nothing refers to any more
            model.cleanup()
            ctx.invalidate()
    alive = {id(op) for _, op in model.iter_ops()}
    rejections: dict[str, Counter[str]] = {}
    for (rule_name, _), (op, reason) in last_reject.items():
        if id(op) in alive:  # anchors swallowed by a later rewrite are no longer rejections
            rejections.setdefault(rule_name, Counter())[reason] += 1
    return RunResult(dict(counts), dict(by_alt), fused, {k: dict(v) for k, v in rejections.items()}, sweeps)


__all__ = [
    "Alternative",
    "Check",
    "Context",
    "FusedOp",
    "Match",
    "Rule",
    "RunResult",
    "TensorRef",
    "executed_subgraphs",
    "ref",
    "run_rules",
]
