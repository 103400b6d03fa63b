"""Run a .tflite file's ``serving_default`` signature in ai_edge_litert's Interpreter: what the parity checks of the
export (export/verify.py) and the per-op error table (opcheck/) share."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np


def run_tflite(path: Path, inputs: dict[str, np.ndarray], delegates: Sequence[Any] = (), num_threads: int | None = None) -> dict[str, np.ndarray]:
    """Run the ``serving_default`` signature of ``path`` in ai_edge_litert's Interpreter."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path), experimental_delegates=list(delegates) or None, num_threads=num_threads)
    runner = interp.get_signature_runner()
    return {k: np.array(v) for k, v in runner(**inputs).items()}
