"""The graph stages of a conversion: fusion (``--fuse``) and the Winograd plan (``--winograd``) on the fp32 graph.

They run before the weight-precision pass on purpose: the Winograd rewrite only takes convolutions whose filter is a
constant in the file (the kernels transform it once at load time), and fp16/int8 weights become DEQUANTIZE outputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from sdconvert.errors import UserError


@dataclass(frozen=True)
class GraphOptions:
    fuse: bool = False
    target: str = "sdgpu"
    attention_variant: str = "auto"
    winograd: str = "off"
    device_profile: str = "adreno740"
    memory_budget: str | None = None
    tune: bool = False

    @property
    def active(self) -> bool:
        return self.fuse or self.winograd != "off"

    def validate(self) -> None:
        from sdconvert.rewrite import ATTENTION_VARIANTS, TARGETS
        from sdconvert.winograd.cost import get_profile, parse_bytes
        from sdconvert.winograd.plan import parse_mode

        if self.target not in TARGETS:
            raise UserError(f"--target must be one of {', '.join(TARGETS)}, got {self.target!r}")
        if self.attention_variant not in ATTENTION_VARIANTS:
            raise UserError(f"--attention-variant must be one of {', '.join(ATTENTION_VARIANTS)}")
        parse_mode(self.winograd)
        get_profile(self.device_profile)
        if self.memory_budget is not None:
            parse_bytes(self.memory_budget)
        if self.winograd != "off" and self.target == "litert":
            raise UserError("--winograd emits SdConv2DWinograd custom ops, which the stock LiteRT GPU target cannot run")


def optimize(path: Path, opts: GraphOptions, say: Callable[[str], None]) -> dict[str, Any]:
    """Rewrite ``path`` in place; returns the manifest entries ``{"fusion": ..., "winograd": ...}``."""
    out: dict[str, Any] = {}
    if opts.fuse:
        from sdconvert.rewrite import fuse_model

        report = fuse_model(path, path, target=opts.target, attention_variant=opts.attention_variant)
        out["fusion"] = report.to_dict(include_ops=False)
    if opts.winograd != "off":
        from sdconvert.graph.io import read_model, write_model
        from sdconvert.winograd.apply import WinogradOptions, winograd_pass
        from sdconvert.winograd.cost import parse_bytes

        model = read_model(path)
        budget = parse_bytes(opts.memory_budget) if opts.memory_budget is not None else None
        plan = winograd_pass(model, WinogradOptions(mode=opts.winograd, profile=opts.device_profile,
                                                    memory_budget=budget, tune=opts.tune), progress=say)
        write_model(model, path)
        out["winograd"] = plan.to_json()
        out["winograd_table"] = plan.format_table()
    return out


def format_fusion(name: str, fusion: dict[str, Any]) -> str:
    rows = [f"{name}: {fusion['ops_before']} -> {fusion['ops_after']} ops"]
    for rule, n in sorted(fusion["counts"].items()):
        rows.append(f"  {rule:<24}{n:>6}")
    return "\n".join(rows)
