"""Measure peak RSS growth of one SdAttention invoke (run in a fresh subprocess by test_memory.py).

Prints JSON: the delegate's reported scratch bytes and the ru_maxrss growth across invoke().
"""
from __future__ import annotations

import argparse
import json
import resource

import numpy as np

from harness import make_interpreter
from sdconvert.ops import attention as A
from sdlite import native
from tflite_models import attention_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--variant", default="flash")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    heads, head_dim, s = 8, 40, args.tokens
    attrs = A.AttentionAttrs(heads=heads, head_dim=head_dim, scale=head_dim**-0.5, variant=args.variant)
    delegate = native.load(num_threads=args.threads)
    interpreter = make_interpreter(attention_model(1, s, s, heads, head_dim, A.SPEC.encode(attrs)), delegate)
    interpreter.allocate_tensors()
    rng = np.random.default_rng(0)
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], rng.standard_normal(detail["shape"]).astype(np.float32))
    # Write the output buffer once so its first-touch page faults are not counted as kernel memory.
    out = interpreter.get_output_details()[0]
    interpreter.set_tensor(out["index"], np.zeros(out["shape"], np.float32))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    interpreter.invoke()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    stats = native.stats(delegate)
    print(json.dumps({"scratch_bytes": stats["max_node_scratch_bytes"], "arena_bytes": stats["max_arena_bytes"],
                      "rss_growth_bytes": after - before, "num_threads": stats["num_threads"]}))


if __name__ == "__main__":
    main()
