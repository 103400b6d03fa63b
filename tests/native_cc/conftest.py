"""The native C++ tests' data checks import the delegate test helpers of tests/native (harness, tflite_models)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))


import pytest  # noqa: E402

from sdlite import native  # noqa: E402


@pytest.fixture(scope="session")
def delegate_lib() -> Path:
    return native.delegate_path()
