"""Run tiny models through the interpreter with the sdgpu delegate (shared by tests and the fuzz worker)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from sdlite import native


@dataclass
class DelegateRun:
    outputs: dict[str, np.ndarray]
    stats: dict[str, Any]


def make_interpreter(model: bytes, delegate: Any, default_delegates: bool = True) -> Interpreter:
    resolver = OpResolverType.AUTO if default_delegates else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    return Interpreter(model_content=model, experimental_delegates=[delegate], experimental_op_resolver_type=resolver)


def run(model: bytes, inputs: dict[str, np.ndarray], **delegate_opts: Any) -> DelegateRun:
    """Build an interpreter with a fresh delegate, run ``serving_default`` once."""
    delegate = native.load(**delegate_opts)
    interpreter = make_interpreter(model, delegate)
    outputs = interpreter.get_signature_runner("serving_default")(**inputs)
    return DelegateRun(outputs=outputs, stats=native.stats(delegate))


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-5) -> None:
    """Elementwise |a - e| <= rtol * (|e| + max|e|): relative, with the tensor's scale as the floor.

    A pure elementwise relative bound is meaningless for entries that are ~0 after cancellation (e.g. an
    attention output averaging thousands of random values), so the absolute floor is rtol x the largest
    reference magnitude.
    """
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == np.float32
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


# activations_fp16 parity: max |actual - expected| / max |expected| against the float32 / float64 reference.
HALF_STORAGE_RTOL = 3e-3


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| / max |expected| (the tensor's scale as the unit)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    return float(np.abs(actual.astype(np.float64) - expected).max() / np.abs(expected).max())


def signature_inputs(runner: Any, rng: np.random.Generator, timestep: float | None = None) -> dict[str, np.ndarray]:
    """Random inputs for every input of a signature runner: int32 ids in [0, 100), floats N(0, 1);
    a ``timestep`` input gets the fixed value ``timestep`` when given."""
    out = {}
    for name, d in runner.get_input_details().items():
        if d["dtype"] == np.int32:
            out[name] = rng.integers(0, 100, d["shape"]).astype(np.int32)
        elif timestep is not None and "timestep" in name:
            out[name] = np.full(d["shape"], timestep, np.float32)
        else:
            out[name] = rng.standard_normal(d["shape"]).astype(np.float32)
    return out
