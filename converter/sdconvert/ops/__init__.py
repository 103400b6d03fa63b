"""Fused op definitions (one per file). ``REGISTRY`` maps custom-op name -> :class:`OpSpec`."""
from __future__ import annotations

from . import attention, conv2d_winograd, gelu, group_norm
from .base import OpAttrError, OpSpec

REGISTRY: dict[str, OpSpec] = {s.name: s for s in (attention.SPEC, gelu.SPEC, group_norm.SPEC, conv2d_winograd.SPEC)}


def register(spec: OpSpec) -> OpSpec:
    """Add an op defined elsewhere (e.g. the Winograd conv) to the registry."""
    REGISTRY[spec.name] = spec
    return spec


def get(name: str) -> OpSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown fused op {name!r}; known: {sorted(REGISTRY)}") from None


__all__ = ["REGISTRY", "OpAttrError", "OpSpec", "get", "register"]
