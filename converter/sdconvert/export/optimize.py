"""The graph stages of a conversion: fusion (``--fuse``) and the Winograd plan (``--winograd``) on the fp32 graph.

They run before the weight-precision pass on purpose: the Winograd rewrite only takes convolutions whose filter is a
constant in the file (the kernels transform it once at load time), and fp16/int8 weights become DEQUANTIZE outputs.
"""
from __future__ import annotations

import argparse
import gc
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from sdconvert.errors import UserError

if TYPE_CHECKING:
    from sdconvert.winograd.tune import Timer


def add_graph_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``graph optimisation`` flags, shared by ``sdconvert`` and ``sdconvert optimize`` (one definition)."""
    g = ap.add_argument_group("graph optimisation")
    g.add_argument("--fuse", action="store_true", help="rewrite attention / GELU / GroupNorm subgraphs into fused Sd* ops")
    g.add_argument("--target", default="sdgpu", choices=("sdgpu", "litert"),
                   help="sdgpu: our delegate's Sd* ops (default); litert: forms the stock LiteRT GPU accelerator accepts")
    g.add_argument("--attention-variant", default="auto", choices=("auto", "partial_softmax", "flash"),
                   help="SdAttention kernel: auto picks per shape (see sdconvert.rewrite.rules.attention)")
    g.add_argument("--no-merge-fc", dest="merge_fc", action="store_false",
                   help="with --fuse: keep FULLY_CONNECTEDs that read one tensor separate (default: merge them into "
                        "one wider FC + SLICEs, see sdconvert.rewrite.merge_fc)")
    g.add_argument("--winograd", default="off", choices=("off", "2", "4", "6", "auto"),
                   help="3x3 conv tiles: force F(m x m,3x3) where suitable, or let the cost model choose (auto)")
    g.add_argument("--device-profile", default="adreno740",
                   help="target device profile: the Winograd cost model and the auto attention variant")
    g.add_argument("--memory-budget", help="budget for Winograd weights + intermediates, e.g. 1GiB (auto mode)")
    g.add_argument("--phone", action="store_true",
                   help="the phone preset: --fuse --winograd auto with the adreno740 profile (its 768 MiB Winograd budget "
                        "counts the bytes the delegate holds with fp16 weights); run it with `sdlite generate --phone`")
    g.add_argument("--tune", action="store_true", help="time candidate tiles on this machine through our delegate (auto mode)")
    g.add_argument("--tune-backend", default="cpu", choices=("cpu", "opencl", "gl"),
                   help="with --tune: the delegate backend to time on; opencl / gl time each candidate by device events "
                        "on this machine's GPU (see sdconvert.winograd.tune)")


@dataclass(frozen=True)
class GraphOptions:
    """The graph stages to run (see :func:`add_graph_arguments` for the flags)."""

    fuse: bool = False
    target: str = "sdgpu"
    attention_variant: str = "auto"
    winograd: str = "off"
    device_profile: str = "adreno740"
    memory_budget: str | None = None
    tune: bool = False
    merge_fc: bool = True
    tune_backend: str = "cpu"
    timer: Timer | None = None  # how --tune times candidates: the command-line layer passes the delegate's

    @classmethod
    def from_args(cls, args: argparse.Namespace, timer: Timer | None = None) -> GraphOptions:
        fuse, winograd = args.fuse, args.winograd
        if getattr(args, "phone", False):  # the phone preset (add_graph_arguments)
            if args.device_profile != "adreno740" or args.target != "sdgpu":
                raise UserError("--phone plans for --device-profile adreno740 and --target sdgpu; drop the other one")
            fuse, winograd = True, "auto" if winograd == "off" else winograd
        return cls(fuse=fuse, target=args.target, attention_variant=args.attention_variant,
                   winograd=winograd, device_profile=args.device_profile, memory_budget=args.memory_budget,
                   tune=args.tune, merge_fc=getattr(args, "merge_fc", True),
                   tune_backend=getattr(args, "tune_backend", "cpu"), timer=timer)

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
        from sdconvert.winograd.tune import TUNE_BACKENDS

        if self.tune_backend not in TUNE_BACKENDS:
            raise UserError(f"--tune-backend must be one of {', '.join(TUNE_BACKENDS)}, got {self.tune_backend!r}")
        if self.tune_backend != "cpu" and not (self.tune and self.winograd == "auto"):
            raise UserError("--tune-backend only applies with --tune --winograd auto")


def optimize(path: Path, opts: GraphOptions, say: Callable[[str], None], dst: Path | None = None) -> dict[str, Any]:
    """Run the graph stages on ``path``, writing ``dst`` (default: ``path`` itself, rewritten atomically).

    Returns the manifest entries ``{"fusion": ..., "winograd": ..., "winograd_table": str}``. Each stage reads the
    file through an mmap (weights stay zero-copy views) and writes it back; the parsed model is collected before the
    next stage so no stage keeps a replaced file (deleted, still mapped) alive -- on the 3.4 GB fp32 SD1.5 UNet that
    is 3.4 GB of disk and page cache per stage.
    """
    dst = path if dst is None else dst
    src = path
    out: dict[str, Any] = {}
    if opts.fuse:
        from sdconvert.rewrite import fuse_model

        report = fuse_model(src, dst, target=opts.target, attention_variant=opts.attention_variant,
                            device_profile=opts.device_profile, merge_fcs=opts.merge_fc)
        out["fusion"] = report.to_dict(include_ops=False)
        out["fit_residuals"] = report.fit_residuals()
        del report
        gc.collect()
        src = dst
    if opts.winograd != "off":
        from sdconvert.graph.io import ModelFormatError, read_model, write_model
        from sdconvert.winograd.apply import WinogradOptions, winograd_pass
        from sdconvert.winograd.cost import parse_bytes

        try:
            model = read_model(src)
        except ModelFormatError as e:
            raise UserError(str(e)) from None
        budget = parse_bytes(opts.memory_budget) if opts.memory_budget is not None else None
        plan = winograd_pass(model, WinogradOptions(mode=opts.winograd, profile=opts.device_profile,
                                                    memory_budget=budget, tune=opts.tune,
                                                    tune_backend=opts.tune_backend, timer=opts.timer), progress=say)
        try:
            write_model(model, dst)
        except OSError as e:
            raise UserError(f"cannot write {dst}: {e.strerror or e}") from None
        del model
        gc.collect()
        out["winograd"] = plan.to_json()
        out["winograd_table"] = plan.format_table()
    return out


def format_fusion(name: str, fusion: dict[str, Any]) -> str:
    rows = [f"{name}: {fusion['ops_before']} -> {fusion['ops_after']} ops"]
    fit = fusion.get("fit_residual_max", {})
    for rule, n in sorted(fusion["counts"].items()):
        rows.append(f"  {rule:<24}{n:>6}" + (f"   fit residual <= {fit[rule]:.1e}" if rule in fit else ""))
    return "\n".join(rows)
