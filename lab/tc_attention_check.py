"""tensor_cores=3xtf32 (or, with --mode fp64, tensor_cores=fp64) on odd shapes (NVIDIA only): one SdAttention node
through the delegate (head dim 40 or 80, flash), with query counts that leave a partial 128-row block and key counts
that leave a partial 64-key block, against the float64 numpy reference; checks that attn_flash_m40 / m80 (fp64: f40 /
f80) is the kernel that ran (device profile) and prints the max error relative to the output's range (bound 1e-4;
fp64 1e-6, below the fp32 kernels' ~1.6e-6). CI cannot run these kernels (PoCL has no inline PTX), hence a device
script.

    python3 lab/tc_attention_check.py [--mode fp64]   # after source .h200/setup.sh; SDLITE_DELEGATE_PATH=...
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "native"))
from harness import make_interpreter  # noqa: E402
from tflite_models import attention_model  # noqa: E402

from sdconvert.ops import attention as A  # noqa: E402
from sdlite import native  # noqa: E402

# (batch, Sq, Sk, heads, head dim): partial query blocks (Sq % 128, % 64), partial key blocks (Sk % 64), Sk at the
# 256-key threshold, SD1.5's 64x64 level at 520 x 520 pixels (65 x 65 latents), its 32x32 level (b2) and 33 x 33;
# the head-dim-80 grids have more work-groups than a 132-CU GPU (fewer: the fp32 h80 runs, by design)
SHAPES = [(1, 300, 300, 2, 40), (2, 130, 1000, 3, 40), (1, 257, 256, 1, 40), (1, 4225, 4225, 2, 40),
          (4, 300, 300, 8, 80), (2, 1024, 1024, 8, 80), (2, 1089, 1089, 8, 80)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("3xtf32", "fp64"), default="3xtf32")
    mode = ap.parse_args().mode
    prefix, bound = ("f", 1e-6) if mode == "fp64" else ("m", 1e-4)
    rng = np.random.default_rng(0)
    worst = 0.0
    ok = True
    for n, sq, sk, heads, d in SHAPES:
        attrs = A.AttentionAttrs(heads=heads, head_dim=d, scale=d**-0.5, causal=False, variant="flash")
        q, k, v = (rng.standard_normal((n, s, heads * d)).astype(np.float32) for s in (sq, sk, sk))
        ref = A.reference([q, k, v], attrs)
        with tempfile.TemporaryDirectory() as tmp:
            prof = Path(tmp) / "p.json"
            delegate = native.load("opencl", profile_path=str(prof), tensor_cores=mode)
            runner = make_interpreter(attention_model(n, sq, sk, heads, d, A.SPEC.encode(attrs)),
                                      delegate).get_signature_runner("serving_default")
            got = runner(q=q, k=k, v=v)["o"]
            kernels = [kern["name"] for node in json.loads(prof.read_text())["nodes"] for kern in node["kernels"]]
        err = float(np.abs(got - ref).max() / np.abs(ref).max())
        worst = max(worst, err)
        good = kernels == [f"attn_flash_{prefix}{d}"] and err < bound and np.isfinite(got).all()
        ok &= good
        print(f"n={n} Sq={sq} Sk={sk} heads={heads} d={d}: kernels {kernels}, max rel err {err:.1e} {'ok' if good else 'FAIL'}",
              flush=True)
    print(f"worst {worst:.1e}: {'all ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
