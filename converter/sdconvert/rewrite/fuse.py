"""``fuse_model``: read a .tflite, run the target's passes and rules, write the result, report what happened.

Targets:
- ``sdgpu`` (default): attention, GroupNorm(+SiLU) and GELU become ``SdAttention``/``SdGroupNorm``/``SdGelu``
  custom ops for our native delegate; LayerNorms become ``SdGroupNorm(groups=1)`` on a [rows, 1, C] view.
  Composites the rules recognise directly (``odml.group_norm``) are fused as they are; all others are inlined and
  the decomposed rules run again. Last, FULLY_CONNECTED siblings that read one tensor (q/k/v, the cross-attention
  k/v of every block, the ResNets' time projections) become one wider FC + SLICEs (:mod:`.merge_fc`; pass
  ``merge_sibling_fc``, counted in FCs removed; ``merge_fcs=False`` skips it).
- ``litert``: a model the stock LiteRT GPU accelerator can run: no custom ops, composites inlined, GroupNorms
  re-emitted without BROADCAST_TO, remaining BROADCAST_TOs folded into implicit broadcasting where shapes allow
  (LayerNorms stay as they are: they have no BROADCAST_TO).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..graph.io import ModelFormatError, read_model, write_model
from ..graph.ir import Model
from .engine import FusedOp, RunResult, executed_subgraphs, run_rules
from .merge_fc import merge_sibling_fcs
from .passes import cancel_transpose_pairs, inline_composites, remove_broadcasts
from .rules import rules_for

TARGETS = ("sdgpu", "litert")
ATTENTION_VARIANTS = ("auto", "partial_softmax", "flash")


@dataclass
class FuseReport:
    """What one fusion run did. ``counts`` is the ``{rule: count}`` table; ``fused`` lists every rewrite."""

    src: str
    dst: str
    target: str
    attention_variant: str
    counts: dict[str, int]
    by_alternative: dict[str, int]
    passes: dict[str, int]
    ops_before: int
    ops_after: int
    histogram_before: dict[str, int]
    histogram_after: dict[str, int]
    rejections: dict[str, dict[str, int]]
    fused: list[FusedOp] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self, *, include_ops: bool = True) -> dict[str, Any]:
        """JSON-serialisable form (the manifest stores ``include_ops=False``)."""
        d: dict[str, Any] = {
            "target": self.target,
            "attention_variant": self.attention_variant,
            "counts": dict(self.counts),
            "by_alternative": dict(self.by_alternative),
            "passes": dict(self.passes),
            "ops_before": self.ops_before,
            "ops_after": self.ops_after,
            "histogram_before": dict(self.histogram_before),
            "histogram_after": dict(self.histogram_after),
            "rejections": {k: dict(v) for k, v in self.rejections.items()},
            "fit_residual_max": self.fit_residual_max(),
            "seconds": round(self.seconds, 3),
        }
        if include_ops:
            d["fused"] = [f.to_dict() for f in self.fused]
        return d

    def fit_residual_max(self) -> dict[str, float]:
        """``{rule: worst fit residual}`` over the rewrites whose rule checked its region numerically (GroupNorm,
        LayerNorm: each site was accepted because its residual was <= 1e-6; this is how close the worst came)."""
        worst: dict[str, float] = {}
        for f in self.fused:
            if f.fit_residual is not None:
                worst[f.rule] = max(worst.get(f.rule, 0.0), f.fit_residual)
        return worst

    def fit_residuals(self) -> dict[str, float]:
        """``{output tensor name: fit residual}`` per numerically checked rewrite (the per-op report's ``fit``)."""
        return {f.output.name: f.fit_residual for f in self.fused if f.fit_residual is not None}

    def format_table(self) -> str:
        """The ``{rule: count}`` table with alternatives, op counts and rejection reasons, for terminals."""
        lines = [f"{'rule':<18}{'fused':>6}  alternatives"]
        for rule, n in self.counts.items():
            alts = ", ".join(
                f"{k.split('/', 1)[1]}={v}" for k, v in self.by_alternative.items() if k.startswith(rule + "/")
            )
            lines.append(f"{rule:<18}{n:>6}  {alts}")
        for name, n in self.passes.items():
            lines.append(f"{name:<18}{n:>6}  (pass)")
        delta = self.ops_after - self.ops_before
        lines.append(f"ops: {self.ops_before} -> {self.ops_after} ({delta:+d})")
        for rule, reasons in self.rejections.items():
            for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
                lines.append(f"rejected {rule} x{n}: {reason}")
        return "\n".join(lines)


def executed_histogram(model: Model) -> dict[str, int]:
    """Op histogram over the subgraphs that run (composite decompositions excluded)."""
    hist: Counter[str] = Counter()
    for _, sg in executed_subgraphs(model):
        hist.update(op.type for op in sg.ops)
    return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


def _merge(into: RunResult | None, res: RunResult) -> RunResult:
    if into is None:
        return res
    counts = Counter(into.counts)
    counts.update(res.counts)
    alts = Counter(into.by_alternative)
    alts.update(res.by_alternative)
    rej = {k: dict(v) for k, v in res.rejections.items()}
    return RunResult(dict(counts), dict(alts), into.fused + res.fused, rej, into.sweeps + res.sweeps)


def fuse(
    model: Model,
    *,
    target: str = "sdgpu",
    attention_variant: str = "auto",
    device_profile: str | None = None,
    merge_fcs: bool = True,
) -> tuple[RunResult, dict[str, int]]:
    """Run the target's pipeline on an in-memory model (mutates it). Returns the rule result and pass counts.

    ``device_profile`` (a :data:`sdconvert.winograd.cost.PROFILES` name) sets the ``auto`` attention variant's
    thresholds; ``None`` keeps the rule's mobile defaults.
    """
    if target not in TARGETS:
        raise UserError(f"unknown fusion target {target!r}; choose one of {', '.join(TARGETS)}")
    if attention_variant not in ATTENTION_VARIANTS:
        raise UserError(
            f"unknown attention variant {attention_variant!r}; choose one of {', '.join(ATTENTION_VARIANTS)}"
        )
    opts: dict[str, Any] = {"attention_variant": attention_variant, "target": target}
    if device_profile is not None:
        from sdconvert.winograd.cost import get_profile

        profile = get_profile(device_profile)
        opts["flash_scores_bytes"] = profile.flash_scores_bytes
        opts["flash_max_head_dim"] = profile.flash_max_head_dim
    passes: dict[str, int] = {}
    result: RunResult | None = None
    if target == "sdgpu":
        result = run_rules(model, rules_for(target), opts)
        inlined = inline_composites(model)
        if inlined:
            result = _merge(result, run_rules(model, rules_for(target), opts))
        if merge_fcs:
            passes["merge_sibling_fc"] = merge_sibling_fcs(model)
    else:
        inlined = inline_composites(model)
        result = run_rules(model, rules_for(target), opts)
        passes["broadcast_to_folded"] = remove_broadcasts(model)
    passes["transpose_pairs_cancelled"] = cancel_transpose_pairs(model)
    for name, n in inlined.items():
        passes[f"inline:{name}"] = n
    model.cleanup()
    for sg in model.subgraphs:
        sg.toposort()
        problems = sg.validate()
        if problems:
            raise RuntimeError(f"fusion produced an invalid graph: {problems[0]}")
    return result, passes


def fuse_model(
    src: Path | str,
    dst: Path | str,
    *,
    target: str = "sdgpu",
    attention_variant: str = "auto",
    device_profile: str | None = None,
    merge_fcs: bool = True,
) -> FuseReport:
    """Fuse ``src`` into ``dst`` (``dst`` may equal ``src``; written atomically). User errors raise ``UserError``."""
    t0 = time.perf_counter()
    src, dst = Path(src), Path(dst)
    try:
        model = read_model(src)
    except ModelFormatError as e:
        raise UserError(str(e)) from None
    hist_before = executed_histogram(model)
    result, passes = fuse(model, target=target, attention_variant=attention_variant, device_profile=device_profile,
                          merge_fcs=merge_fcs)
    try:
        write_model(model, dst)
    except OSError as e:
        raise UserError(f"cannot write {dst}: {e.strerror or e}") from None
    hist_after = executed_histogram(model)
    return FuseReport(
        str(src),
        str(dst),
        target,
        attention_variant,
        result.counts,
        result.by_alternative,
        passes,
        sum(hist_before.values()),
        sum(hist_after.values()),
        hist_before,
        hist_after,
        result.rejections,
        result.fused,
        time.perf_counter() - t0,
    )


__all__ = ["ATTENTION_VARIANTS", "TARGETS", "FuseReport", "executed_histogram", "fuse", "fuse_model"]
