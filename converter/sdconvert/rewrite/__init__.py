"""Graph rewriting: the rule engine, the fusion rules and ``fuse_model`` (the ``--fuse`` entry point)."""

from __future__ import annotations

from .engine import Alternative, Check, FusedOp, Match, Rule, RunResult, TensorRef, run_rules
from .fuse import ATTENTION_VARIANTS, TARGETS, FuseReport, fuse, fuse_model
from .passes import inline_composites, remove_broadcasts
from .sites import expected_sites

__all__ = [
    "ATTENTION_VARIANTS",
    "Alternative",
    "Check",
    "FuseReport",
    "FusedOp",
    "Match",
    "Rule",
    "RunResult",
    "TARGETS",
    "TensorRef",
    "expected_sites",
    "fuse",
    "fuse_model",
    "inline_composites",
    "remove_broadcasts",
    "run_rules",
]
