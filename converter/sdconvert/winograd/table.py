"""Print (markdown) the Winograd tile-size table for SD1.x next to the paper's, and optionally the plan.

Everything is computed analytically from ``sdconvert.configs`` -- no SD1.5 weights are built.

    python -m sdconvert.winograd.table                     # paper table + per-map table + explanations
    python -m sdconvert.winograd.table --plan --profile adreno740 [--winograd auto] [--memory-budget 768MiB]
                                       [--plan-json plan.json]
    python -m sdconvert.winograd.table --accuracy [--small]  # measured fp32 error per tile (SD shapes: ~1 min)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sdconvert.configs import get_config
from sdconvert.errors import UserError
from sdconvert.winograd.accuracy import SD15_LEVEL_SHAPES, SMALL_SHAPES, accuracy_markdown, measure
from sdconvert.winograd.cost import PROFILES, parse_bytes
from sdconvert.winograd.plan import MODES, make_plan
from sdconvert.winograd.report import differences_markdown, paper_table_markdown, per_map_markdown
from sdconvert.winograd.sd_shapes import MODELS, model_convs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="winograd_table", description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="sd15", help="embedded config (sd15, tiny)")
    ap.add_argument("--model", default="unet", choices=MODELS)
    ap.add_argument("--height", type=int, default=None)
    ap.add_argument("--width", type=int, default=None)
    ap.add_argument("--batch", type=int, default=1, help="UNet batch (2 = classifier-free guidance)")
    ap.add_argument("--plan", action="store_true", help="print the per-conv plan instead of the tables")
    ap.add_argument("--profile", default="adreno740", choices=sorted(PROFILES))
    ap.add_argument("--winograd", default="auto", choices=MODES)
    ap.add_argument("--memory-budget", default=None, help="bytes for transformed weights + scratch (e.g. 1GiB)")
    ap.add_argument("--plan-json", type=Path, default=None, help="also write the plan (manifest format) here")
    ap.add_argument("--accuracy", action="store_true", help="measure fp32 error per tile size")
    ap.add_argument("--small", action="store_true", help="with --accuracy: CI-sized shapes instead of SD's")
    args = ap.parse_args(argv)
    try:
        cfg = get_config(args.config)
        specs = model_convs(cfg, args.model, args.height, args.width, args.batch)
        title = f"{cfg.name} {args.model} at {args.height or cfg.default_height}x{args.width or cfg.default_width}"
        if args.accuracy:
            shapes = SMALL_SHAPES if args.small else SD15_LEVEL_SHAPES
            print(accuracy_markdown(measure(shapes)))
            return 0
        if args.plan:
            budget = None if args.memory_budget is None else parse_bytes(args.memory_budget)
            plan = make_plan(specs, args.winograd, args.profile, budget)
            print(f"Winograd plan for the {title}, batch {args.batch}\n")
            print(plan.format_table())
            if args.plan_json:
                args.plan_json.write_text(json.dumps(plan.to_json(), indent=1) + "\n")
            return 0
        print(paper_table_markdown(specs, title=title))
        print()
        print(per_map_markdown(specs))
        print()
        print(differences_markdown(specs))
        return 0
    except UserError as e:
        print(f"winograd_table: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
