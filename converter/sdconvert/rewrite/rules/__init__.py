"""The fusion rules, one file each. ``rules_for(target)`` is the ordered rule list a target runs."""

from __future__ import annotations

from ..engine import Rule


def rules_for(target: str) -> list[Rule]:
    """``sdgpu``: attention, GroupNorm(+SiLU), GELU -> Sd* custom ops. ``litert``: stock-op GroupNorm only."""
    from . import attention, gelu, group_norm, group_norm_stock

    if target == "sdgpu":
        return [attention.RULE, group_norm.RULE, gelu.RULE]
    if target == "litert":
        return [group_norm_stock.STOCK_RULE]
    raise ValueError(f"unknown target {target!r}")


__all__ = ["rules_for"]
