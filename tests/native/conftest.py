"""Fixtures for the native delegate tests.

The delegate must be built first: ``pip install -e ".[convert,test]" --no-build-isolation`` (installs
libsdgpu_delegate.so into the sdlite package), or point SDLITE_DELEGATE_PATH at a cmake build directory.
A missing library fails these tests with the one-line NativeDelegateError; nothing is skipped.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sdlite import native


@pytest.fixture(scope="session")
def delegate_lib() -> Path:
    return native.delegate_path()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
