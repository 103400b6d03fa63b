"""One delegate run in its own process, for the persistent-cache tests (test_delegate_cache.py): the cache is about
what a later process finds, so each run is a fresh process.

``python cache_child.py MODEL INPUTS.npz OUT.npz BACKEND [key=value ...]``: loads MODEL with our delegate on BACKEND
with those delegate options, invokes it twice on INPUTS, writes the outputs of both invokes to OUT.npz and prints the
delegate's stats as one JSON line (the delegate's log goes to stderr).
"""
from __future__ import annotations

import json
import sys

import numpy as np


def main(argv: list[str]) -> int:
    from ai_edge_litert.interpreter import Interpreter

    from sdlite import native

    model, inputs, out, backend, *pairs = argv
    opts = dict(p.split("=", 1) for p in pairs)
    delegate = native.load(backend, **native.parse_options_text(";".join(f"{k}:{v}" for k, v in opts.items())))
    interp = Interpreter(model_path=model, experimental_delegates=[delegate])
    interp.allocate_tensors()
    feeds = np.load(inputs)
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], feeds[d["name"]])
    results = {}
    for run in range(2):
        interp.invoke()
        for d in interp.get_output_details():
            results[f"{run}:{d['name']}"] = interp.get_tensor(d["index"])
    np.savez(out, **results)
    print(json.dumps(native.stats(delegate)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
