"""Plan the CONV_2D ops of a graph-IR model and rewrite the chosen ones to ``SdConv2DWinograd``.

    plan = plan_model(model, mode="auto", profile="adreno740", memory_budget=None)
    rewritten = apply_plan(model, plan)      # CONV_2D -> SdConv2DWinograd where plan says F2/F4/F6

The rewritten op keeps the original ``[Cout,3,3,Cin]`` filter tensor (the kernels transform it at load time,
so the file does not grow) and the bias (a zero bias constant is added when the CONV_2D had none). Convs are
matched between planning and rewriting by position among CONV_2D ops *and* shape, so a plan computed for a
different graph is rejected instead of silently misapplied. litert-torch lowers PyTorch ``padding=1`` stride-1
3x3 convs to SAME CONV_2D (explicit PAD + VALID only for strided convs), so no PAD folding is needed.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sdconvert.errors import UserError
from sdconvert.graph import Model, Op, OpCode, Subgraph
from sdconvert.graph.ir import numpy_dtype
from sdconvert.graph.schema import S
from sdconvert.ops.conv2d_winograd import SPEC, Conv2DWinogradAttrs
from sdconvert.winograd.convspec import ConvSpec
from sdconvert.winograd.cost import DeviceProfile
from sdconvert.winograd.plan import Measurements, WinogradPlan, make_plan, parse_mode

if TYPE_CHECKING:
    from sdconvert.winograd.tune import Timer

#: TFLite ActivationFunctionType -> SdConv2DWinograd activation name (SIGN_BIT has no counterpart).
_ACTIVATIONS = {
    S.ActivationFunctionType.NONE: "none",
    S.ActivationFunctionType.RELU: "relu",
    S.ActivationFunctionType.RELU6: "relu6",
    S.ActivationFunctionType.RELU_N1_TO_1: "relu_n1_to_1",
    S.ActivationFunctionType.TANH: "tanh",
}


def iter_convs(model: Model) -> Iterator[tuple[Subgraph, Op, ConvSpec]]:
    """Every CONV_2D with a ranked NHWC input, in subgraph/op order, with its :class:`ConvSpec`."""
    for sg in model.subgraphs:
        for index, op in enumerate(sg.ops):
            if op.type != "CONV_2D" or len(op.inputs) < 2:
                continue
            x, w = op.inputs[0], op.inputs[1]
            if x is None or w is None or x.shape is None or w.shape is None or len(x.shape) != 4 or len(w.shape) != 4:
                continue
            o = op.options
            act = getattr(o, "fusedActivationFunction", S.ActivationFunctionType.NONE)
            dtype = numpy_dtype(x.dtype)
            wdtype = numpy_dtype(w.dtype)
            groups = x.shape[3] // w.shape[3] if w.shape[3] and x.shape[3] % w.shape[3] == 0 else 0
            yield sg, op, ConvSpec(
                name=op.outputs[0].name if op.outputs else f"conv{index}",
                batch=x.shape[0], in_h=x.shape[1], in_w=x.shape[2], in_c=x.shape[3], out_c=w.shape[0],
                kernel_h=w.shape[1], kernel_w=w.shape[2],
                stride_h=getattr(o, "strideH", 1), stride_w=getattr(o, "strideW", 1),
                dilation_h=getattr(o, "dilationHFactor", 1), dilation_w=getattr(o, "dilationWFactor", 1),
                groups=groups,
                padding="SAME" if getattr(o, "padding", S.Padding.SAME) == S.Padding.SAME else "VALID",
                activation=_ACTIVATIONS.get(act, f"tflite_activation_{act}"),
                dtype=str(dtype) if dtype == wdtype else f"{dtype}/{wdtype}",
                filter_is_constant=w.is_constant,
                op_index=index if sg is model.main else None,
            )


def plan_model(model: Model, mode: str | int = "auto", profile: str | DeviceProfile = "cpu",
               memory_budget: int | None = None, measured: Measurements | None = None) -> WinogradPlan:
    """:func:`sdconvert.winograd.plan.make_plan` over every CONV_2D of ``model``."""
    return make_plan([spec for _, _, spec in iter_convs(model)], mode, profile, memory_budget, measured=measured)


def apply_plan(model: Model, plan: WinogradPlan) -> int:
    """Replace each CONV_2D the plan assigns a tile with ``SdConv2DWinograd``; returns the number replaced."""
    convs = list(iter_convs(model))
    if len(convs) != len(plan.decisions):
        raise ValueError(f"plan has {len(plan.decisions)} convs but the model has {len(convs)}")
    replaced = 0
    for (sg, op, spec), decision in zip(convs, plan.decisions):
        if spec.shape_key() != decision.spec.shape_key():
            raise ValueError(f"plan does not match the model at conv {spec.name!r}: "
                             f"{decision.spec.shape_key()} vs {spec.shape_key()}")
        if decision.tile == 0:
            continue
        if not decision.suitable:
            raise ValueError(f"plan assigns F{decision.tile} to unsuitable conv {spec.name!r} ({decision.reason})")
        x, w = op.inputs[0], op.inputs[1]
        bias = op.inputs[2] if len(op.inputs) > 2 else None
        if bias is None:
            bias = sg.new_constant(f"{spec.name}/winograd_zero_bias", np.zeros(spec.out_c, np.float32))
        attrs = Conv2DWinogradAttrs(tile=decision.tile, padding=spec.padding, activation=spec.activation)
        out = op.outputs[0]
        position = next(i for i, o in enumerate(sg.ops) if o is op)
        sg.remove_ops([op])
        new = Op(OpCode.of(SPEC.name, SPEC.version), [x, w, bias], [out],
                 custom_options=SPEC.encode(attrs), custom_options_format=S.CustomOptionsFormat.FLEXBUFFERS)
        sg.ops.insert(position, new)
        replaced += 1
    return replaced



@dataclass(frozen=True)
class WinogradOptions:
    """The converter's Winograd settings (CLI: ``--winograd``, ``--device-profile``, ``--memory-budget``,
    ``--tune``). ``memory_budget`` None = the profile's default."""

    mode: str = "off"
    profile: str = "adreno740"
    memory_budget: int | None = None
    tune: bool = False
    tune_threads: int | None = None
    tune_backend: str = "cpu"
    timer: Timer | None = None  # how ``tune`` times candidates (the CLI passes sdconvert.delegate_timer's)


def winograd_pass(model: Model, options: WinogradOptions,
                  progress: Callable[[str], None] | None = None) -> WinogradPlan:
    """Plan (timing candidates first with ``tune``) and rewrite ``model`` in place; returns the plan, whose
    :meth:`~WinogradPlan.format_table` is printed and :meth:`~WinogradPlan.to_json` stored in the manifest."""
    measured = None
    if options.tune and parse_mode(options.mode) == "auto":
        from sdconvert.winograd.cost import get_profile
        from sdconvert.winograd.tune import tune

        if options.timer is None:
            raise UserError("--tune needs a timer of the target runtime (WinogradOptions.timer, e.g. "
                            "sdconvert.delegate_timer.DelegateTimer())")
        measured = tune([s for _, _, s in iter_convs(model)], options.timer, num_threads=options.tune_threads,
                        progress=progress, backend=options.tune_backend, profile=get_profile(options.profile))
    plan = plan_model(model, options.mode, options.profile, options.memory_budget, measured)
    apply_plan(model, plan)
    return plan
