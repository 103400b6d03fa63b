"""Shape/attribute record of one 2-D convolution and the Winograd *suitability* test.

Suitability is a yes/no property of the op ("can F(m x m, 3 x 3) compute this exactly?") and is kept
separate from the cost model's *recommendation* ("is it worth it here?", :mod:`sdconvert.winograd.cost`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sdconvert.ops.conv2d_reference import ACTIVATIONS


@dataclass(frozen=True)
class ConvSpec:
    """One CONV_2D: NHWC input ``[batch, in_h, in_w, in_c]``, filter ``[out_c, kernel_h, kernel_w, in_c/groups]``.

    ``padding`` has TFLite semantics (SAME/VALID); ``op_index`` is the operator index in the subgraph when
    the spec was read from a graph (None for analytic SD shapes).
    """

    name: str
    batch: int
    in_h: int
    in_w: int
    in_c: int
    out_c: int
    kernel_h: int = 3
    kernel_w: int = 3
    stride_h: int = 1
    stride_w: int = 1
    dilation_h: int = 1
    dilation_w: int = 1
    groups: int = 1
    padding: str = "SAME"
    activation: str = "none"
    dtype: str = "float32"
    filter_is_constant: bool = True
    op_index: int | None = None

    @property
    def out_h(self) -> int:
        return _out_size(self.in_h, self.kernel_h, self.stride_h, self.dilation_h, self.padding)

    @property
    def out_w(self) -> int:
        return _out_size(self.in_w, self.kernel_w, self.stride_w, self.dilation_w, self.padding)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the direct convolution."""
        return (self.batch * self.out_h * self.out_w * self.out_c
                * self.kernel_h * self.kernel_w * (self.in_c // self.groups))

    def shape_key(self) -> tuple[int, ...]:
        """What determines a conv's cost (used to share ``--tune`` measurements between equal shapes)."""
        return (self.batch, self.in_h, self.in_w, self.in_c, self.out_c, self.kernel_h, self.kernel_w,
                self.stride_h, self.stride_w, self.padding == "SAME")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ConvSpec:
        return cls(**d)


def _out_size(n: int, k: int, s: int, d: int, padding: str) -> int:
    if padding == "SAME":
        return -(-n // s)
    return max(0, -(-(n - (k - 1) * d) // s))


def suitability(spec: ConvSpec) -> tuple[bool, str]:
    """Whether F(m x m, 3 x 3) can replace ``spec`` exactly; the reason is a short phrase for the plan table."""
    checks = (
        ((spec.kernel_h, spec.kernel_w) == (3, 3), f"kernel {spec.kernel_h}x{spec.kernel_w}"),
        ((spec.stride_h, spec.stride_w) == (1, 1), f"stride {spec.stride_h}x{spec.stride_w}"),
        ((spec.dilation_h, spec.dilation_w) == (1, 1), f"dilation {spec.dilation_h}x{spec.dilation_w}"),
        (spec.groups == 1, f"groups {spec.groups}"),
        (spec.padding in ("SAME", "VALID"), f"padding {spec.padding}"),
        (spec.activation in ACTIVATIONS, f"activation {spec.activation}"),
        (spec.dtype == "float32", f"dtype {spec.dtype}"),
        (spec.filter_is_constant, "filter not constant"),
        (spec.out_h >= 1 and spec.out_w >= 1, "empty output"),
    )
    for ok, reason in checks:
        if not ok:
            return False, reason
    return True, "3x3 s1"
