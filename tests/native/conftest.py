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


@pytest.fixture(scope="session")
def tiny_variant_folders(tmp_path_factory, tiny_export: Path) -> dict[str, Path]:
    """A folder per variant of the tiny text encoder, UNet and VAE decoder: "plain" (the export as converted),
    "fused", and "f2" / "f4" / "f6" (fused with Winograd F2 / F4 / F6 convs)."""
    from sdconvert.export.optimize import GraphOptions
    from sdconvert.optimize_cli import optimize_file

    out = {"plain": tiny_export}
    for variant, options in (("fused", GraphOptions(fuse=True)),
                             *((f"f{t}", GraphOptions(fuse=True, winograd=t)) for t in ("2", "4", "6"))):
        folder = tmp_path_factory.mktemp(f"tiny-{variant}")
        for name in ("text_encoder", "unet", "vae_decoder"):
            optimize_file(tiny_export / f"{name}.tflite", folder / f"{name}.tflite", options)
        out[variant] = folder
    return out


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
