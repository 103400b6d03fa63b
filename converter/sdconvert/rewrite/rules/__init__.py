"""The fusion rules, one file each. ``rules_for(target)`` is the ordered rule list a target runs."""

from __future__ import annotations

from ..engine import Rule


def rules_for(target: str) -> list[Rule]:
    """``sdgpu``: attention, GroupNorm(+SiLU), LayerNorm (as one-group SdGroupNorm), GELU -> Sd* custom ops.
    ``litert``: stock-op GroupNorm only (its LayerNorms already run on the stock GPU accelerator).

    ``layer_norm`` runs after ``group_norm``: a GroupNorm's grouped view [N, G, K] reduced over K also looks like a
    LayerNorm over the last axis, and must become a per-channel GroupNorm first."""
    from . import attention, gelu, group_norm, group_norm_stock, layer_norm

    if target == "sdgpu":
        return [attention.RULE, group_norm.RULE, layer_norm.RULE, gelu.RULE]
    if target == "litert":
        return [group_norm_stock.STOCK_RULE]
    raise ValueError(f"unknown target {target!r}")


__all__ = ["rules_for"]
