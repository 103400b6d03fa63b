"""The Winograd planner: per CONV_2D, ``direct`` or F(2x2/4x4/6x6, 3x3), with a printable/JSON plan.

Modes (``--winograd``):
* ``off``: every conv direct.
* ``2`` / ``4`` / ``6``: that tile size wherever the conv is *suitable* (cost model and budget ignored;
  a note is added when the forced plan exceeds the memory budget, and one that counts the convs with fewer
  tiles than ``DeviceProfile.min_tiles``, which the GPU backend runs direct, e.g. F(4x4) on SD1.5's 16x16
  and 8x8 maps).
* ``auto`` only considers tiles the profile's backend really runs in the Winograd domain.
* ``auto``: each suitable conv gets the cost model's fastest candidate (its *recommendation*); then, while
  transformed weights (summed) + Winograd scratch (max over convs, buffers are reused) exceed
  ``--memory-budget``, the conv whose downgrade costs the least predicted time per byte freed is moved to a
  smaller tile or to direct (greedy knapsack: not optimal, but monotone and fast for ~100 convs).
``measured`` timings (from ``--tune``) replace predictions for the shapes they cover.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sdconvert.winograd.convspec import ConvSpec, suitability
from sdconvert.winograd.cost import (CostEstimate, DeviceProfile, MiB, estimate, get_profile, num_tiles,
                                    runs_winograd)
from sdconvert.ops.conv2d_winograd import KERNEL_TILES

MODES: tuple[str, ...] = ("off", "auto") + tuple(str(t) for t in KERNEL_TILES)

#: ``(ConvSpec.shape_key(), tile)`` -> measured seconds.
Measurements = Mapping[tuple[tuple[int, ...], int], float]


def tile_label(tile: int) -> str:
    """``0`` -> ``"direct"``, ``4`` -> ``"F4"`` (F(4x4, 3x3))."""
    return "direct" if tile == 0 else f"F{tile}"


def parse_tile_label(label: str) -> int:
    return 0 if label == "direct" else int(label[1:])


def parse_mode(mode: str | int) -> str:
    """Validate a ``--winograd`` value (one-line user error otherwise)."""
    m = str(mode).strip().lower()
    if m not in MODES:
        from sdconvert.errors import UserError

        raise UserError(f"--winograd must be one of {', '.join(MODES)}; got {mode!r}")
    return m


@dataclass(frozen=True)
class ConvDecision:
    """Planner output for one conv: suitability, the cost model's recommendation and the final choice."""

    spec: ConvSpec
    suitable: bool
    reason: str
    recommended: int
    tile: int
    predicted: dict[int, CostEstimate]
    source: str = "model"

    @property
    def chosen(self) -> CostEstimate:
        return self.predicted[self.tile]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "op_index": self.spec.op_index,
            "shape": self.spec.to_json(),
            "suitable": self.suitable,
            "reason": self.reason,
            "recommended": tile_label(self.recommended),
            "decision": tile_label(self.tile),
            "tile": self.tile,
            "predicted_ms": {tile_label(t): round(c.time_s * 1e3, 6) for t, c in sorted(self.predicted.items())},
            "weight_bytes": self.chosen.weight_bytes,
            "scratch_bytes": self.chosen.scratch_bytes,
            "source": self.source,
        }


@dataclass
class WinogradPlan:
    """All decisions of one model plus the settings that produced them."""

    mode: str
    profile: DeviceProfile
    memory_budget: int
    decisions: list[ConvDecision]
    notes: list[str] = field(default_factory=list)

    @property
    def weight_bytes(self) -> int:
        return sum(d.chosen.weight_bytes for d in self.decisions)

    @property
    def peak_scratch_bytes(self) -> int:
        return max((d.chosen.scratch_bytes for d in self.decisions), default=0)

    @property
    def memory_bytes(self) -> int:
        return self.weight_bytes + self.peak_scratch_bytes

    @property
    def predicted_s(self) -> float:
        return sum(d.chosen.time_s for d in self.decisions)

    @property
    def predicted_direct_s(self) -> float:
        return sum(d.predicted[0].time_s for d in self.decisions)

    def counts(self) -> dict[str, int]:
        out = {tile_label(t): 0 for t in (0,) + KERNEL_TILES}
        for d in self.decisions:
            out[tile_label(d.tile)] += 1
        return out

    def by_op_index(self) -> dict[int, ConvDecision]:
        return {d.spec.op_index: d for d in self.decisions if d.spec.op_index is not None}

    def summary(self) -> dict[str, Any]:
        return {
            "convs": len(self.decisions),
            "suitable": sum(d.suitable for d in self.decisions),
            "decisions": self.counts(),
            "predicted_direct_ms": round(self.predicted_direct_s * 1e3, 4),
            "predicted_plan_ms": round(self.predicted_s * 1e3, 4),
            "transformed_weight_bytes": self.weight_bytes,
            "peak_scratch_bytes": self.peak_scratch_bytes,
            "within_budget": self.memory_bytes <= self.memory_budget,
        }

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``winograd`` entry."""
        return {
            "mode": self.mode,
            "profile": self.profile.name,
            "element_bytes": self.profile.element_bytes,
            "memory_budget_bytes": self.memory_budget,
            "summary": self.summary(),
            "convs": [d.to_json() for d in self.decisions],
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WinogradPlan:
        """Rebuild a plan from :meth:`to_json` (predictions are recomputed; measured times are kept)."""
        profile = get_profile(data["profile"])
        decisions = []
        for c in data["convs"]:
            spec = ConvSpec.from_json(c["shape"])
            predicted = {t: estimate(spec, t, profile) for t in map(parse_tile_label, c["predicted_ms"])}
            if c.get("source") == "measured":
                predicted = {t: replace(e, time_s=c["predicted_ms"][tile_label(t)] / 1e3)
                             for t, e in predicted.items()}
            decisions.append(ConvDecision(spec, c["suitable"], c["reason"], parse_tile_label(c["recommended"]),
                                          c["tile"], predicted, c.get("source", "model")))
        return cls(data["mode"], profile, data["memory_budget_bytes"], decisions, list(data.get("notes", [])))

    def format_table(self) -> str:
        """Markdown table: one row per Winograd-suitable conv with shape, decision and predicted cost, then totals.

        Unsuitable convs (1x1, stride 2, ...) are only counted, by reason; every conv is in :meth:`to_json`.
        Names are the TFLite tensor names shortened to their last module scopes (:func:`short_conv_name`)."""
        head = ("| # | conv | N x H x W | Cin -> Cout | k/s | recommended | decision "
                "| direct ms | plan ms | +MiB |")
        rows = [head, "|" + "---|" * 10]
        unsuitable: dict[str, int] = {}
        for i, d in enumerate(self.decisions):
            if not d.suitable:
                unsuitable[d.reason] = unsuitable.get(d.reason, 0) + 1
                continue
            s = d.spec
            idx = s.op_index if s.op_index is not None else i
            extra = d.chosen.memory_bytes / MiB
            rows.append(
                f"| {idx} | {short_conv_name(s.name)} | {s.batch}x{s.in_h}x{s.in_w} | {s.in_c} -> {s.out_c} "
                f"| {s.kernel_h}x{s.kernel_w}/{s.stride_h} | {tile_label(d.recommended)} | {tile_label(d.tile)} "
                f"| {d.predicted[0].time_s * 1e3:.4f} | {d.chosen.time_s * 1e3:.4f} | {extra:.1f} |")
        sm = self.summary()
        speedup = self.predicted_direct_s / self.predicted_s if self.predicted_s else 1.0
        counts = ", ".join(f"{k}: {v}" for k, v in sm["decisions"].items())
        rows.append("")
        if unsuitable:
            reasons = ", ".join(f"{why}: {n}" for why, n in sorted(unsuitable.items(), key=lambda kv: -kv[1]))
            rows.append(f"not listed: {sum(unsuitable.values())} convs Winograd cannot replace ({reasons}); they stay "
                        "direct (every conv is in the manifest's winograd plan)")
        rows.append(
            f"winograd={self.mode} profile={self.profile.name} convs={sm['convs']} suitable={sm['suitable']} "
            f"({counts}); predicted conv time {sm['predicted_direct_ms']:.3f} ms direct -> "
            f"{sm['predicted_plan_ms']:.3f} ms ({speedup:.2f}x); transformed weights "
            f"{self.weight_bytes / MiB:.1f} MiB + peak scratch {self.peak_scratch_bytes / MiB:.1f} MiB "
            f"of {self.memory_budget / MiB:.0f} MiB budget")
        rows += [f"note: {n}" for n in self.notes]
        return "\n".join(rows)


def _scope(part: str) -> str:
    """``torch.nn.modules.conv.Conv2d_conv1;2`` -> ``Conv2d_conv1``; a diffusers module path such as
    ``down_blocks.0.resnets.0.conv1`` (no class name at the end) is kept whole."""
    part = part.split(";")[0]
    last = part.rsplit(".", 1)[-1]
    return last if last[:1].isupper() else part


def short_conv_name(name: str, width: int = 56) -> str:
    """A TFLite tensor name (``sdconvert.export.wrappers.UNet/diffusers.models...ResnetBlock2D_0/torch.nn.modules.conv.
    Conv2d_conv1;2``, ~300 characters) as its module scopes without package paths and ``;N`` suffixes, keeping the
    innermost ones that fit in ``width``: ``.../CrossAttnDownBlock2D_0/ResnetBlock2D_0/Conv2d_conv1``."""
    scopes = [_scope(part) for part in name.split("/")]
    scopes = [s for s in scopes if s] or [name]
    if len("/".join(scopes)) <= width:
        return "/".join(scopes)
    kept: list[str] = []
    for scope in reversed(scopes):
        if kept and len("/".join([scope, *kept])) + 4 > width:
            return ".../" + "/".join(kept)
        kept.insert(0, scope)
    text = "/".join(kept)
    return text if len(text) <= width else text[: width - 3] + "..."


def _candidates(spec: ConvSpec, suitable: bool, tiles: Sequence[int], profile: DeviceProfile,
                measured: Measurements | None, forced: int = 0) -> tuple[dict[int, CostEstimate], str]:
    runnable = tuple(t for t in tiles if t == forced or runs_winograd(spec, t, profile))
    options = (0,) + (runnable if suitable else ())
    predicted = {t: estimate(spec, t, profile) for t in options}
    source = "model"
    if measured:
        key = spec.shape_key()
        hits = {t: measured[(key, t)] for t in options if (key, t) in measured}
        if len(hits) == len(options):
            predicted = {t: replace(c, time_s=hits[t]) for t, c in predicted.items()}
            source = "measured"
    return predicted, source


def _fastest(predicted: Mapping[int, CostEstimate]) -> int:
    return min(predicted, key=lambda t: (predicted[t].time_s, predicted[t].memory_bytes, t))


def _fit_budget(decisions: list[ConvDecision], budget: int) -> list[ConvDecision]:
    """Greedy downgrade until transformed weights + peak scratch fit ``budget`` (see module docstring)."""
    decisions = list(decisions)
    while True:
        weights = sum(d.chosen.weight_bytes for d in decisions)
        scratch = [d.chosen.scratch_bytes for d in decisions]
        used = weights + max(scratch, default=0)
        if used <= budget:
            return decisions
        order = sorted(range(len(scratch)), key=scratch.__getitem__, reverse=True)
        best: tuple[float, int, int] | None = None
        for i, d in enumerate(decisions):
            if d.tile == 0:
                continue
            other_peak = scratch[order[0]] if order[0] != i else (scratch[order[1]] if len(order) > 1 else 0)
            for t, c in d.predicted.items():
                if c.memory_bytes >= d.chosen.memory_bytes:
                    continue
                new_used = weights - d.chosen.weight_bytes + c.weight_bytes + max(other_peak, c.scratch_bytes)
                freed = used - new_used
                if freed <= 0:
                    continue
                score = (c.time_s - d.chosen.time_s) / freed
                if best is None or score < best[0]:
                    best = (score, i, t)
        if best is None:
            return decisions
        _, i, t = best
        decisions[i] = replace(decisions[i], tile=t)


def make_plan(specs: Sequence[ConvSpec], mode: str | int = "auto", profile: str | DeviceProfile = "cpu",
              memory_budget: int | None = None, tiles: Sequence[int] = KERNEL_TILES,
              measured: Measurements | None = None) -> WinogradPlan:
    """Plan every conv in ``specs`` (module docstring); ``memory_budget`` defaults to the profile's."""
    mode = parse_mode(mode)
    prof = get_profile(profile) if isinstance(profile, str) else profile
    budget = prof.memory_budget if memory_budget is None else int(memory_budget)
    if mode not in ("off", "auto"):
        tiles = (int(mode),)
    decisions = []
    too_few_tiles = too_big = 0
    for spec in specs:
        ok, reason = suitability(spec)
        forced = int(mode) if mode not in ("off", "auto") else 0
        predicted, source = _candidates(spec, ok, tiles, prof, measured, forced)
        rec = _fastest({t: c for t, c in predicted.items() if runs_winograd(spec, t, prof)})
        if mode == "off" or not ok:
            tile = 0
        else:
            tile = rec if mode == "auto" else forced
            if not runs_winograd(spec, tile, prof):  # (tile > 0: direct always runs)
                if num_tiles(spec, tile) < prof.min_tiles:
                    too_few_tiles += 1
                else:
                    too_big += 1
        decisions.append(ConvDecision(spec, ok, reason, rec, tile, predicted, source))
    plan = WinogradPlan(mode, prof, budget, decisions)
    if too_few_tiles:
        plan.notes.append(f"{too_few_tiles} conv(s) have fewer than {prof.min_tiles} tiles at F{mode}: the "
                          f"{prof.name} GPU backend runs them direct (--winograd auto leaves them direct)")
    if too_big:
        plan.notes.append(f"{too_big} conv(s) at F{mode} need more than one {prof.max_buffer_bytes / MiB:.0f} MiB "
                          f"buffer for their transformed input and output: the {prof.name} GPU backend runs them "
                          f"direct (--winograd auto leaves them direct)")
    if mode == "auto":
        plan.decisions = _fit_budget(decisions, budget)
        if plan.memory_bytes > budget:
            plan.notes.append("memory budget unreachable even with every conv direct")
        downgraded = sum(d.tile != d.recommended for d in plan.decisions)
        if downgraded:
            plan.notes.append(f"{downgraded} conv(s) moved off their recommended tile to fit the memory budget")
    elif plan.memory_bytes > budget:
        plan.notes.append(f"forced --winograd {mode} needs {plan.memory_bytes / MiB:.1f} MiB, over the "
                          f"{budget / MiB:.0f} MiB budget")
    return plan
