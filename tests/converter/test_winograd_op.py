"""The SdConv2DWinograd op definition (attrs codec, reference) and the generated C++ matrices."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sdconvert.ops.base import OpAttrError
from sdconvert.ops.conv2d_winograd import SPEC, Conv2DWinogradAttrs
from sdconvert.winograd import codegen
from sdconvert.winograd.accuracy import random_problem

ROOT = Path(__file__).resolve().parents[2]


def test_attrs_round_trip() -> None:
    for tile in (2, 4, 6):
        for padding in ("SAME", "VALID"):
            attrs = Conv2DWinogradAttrs(tile=tile, padding=padding, activation="relu6")
            assert SPEC.decode(SPEC.encode(attrs)) == attrs
    assert (SPEC.name, SPEC.version, SPEC.num_inputs) == ("SdConv2DWinograd", 1, 3)


@pytest.mark.parametrize("attrs, message", [
    (Conv2DWinogradAttrs(tile=8), "SdConv2DWinograd: tile must be one of (2, 4, 6), got 8"),
    (Conv2DWinogradAttrs(tile=4, padding="same"), "SdConv2DWinograd: padding must be one of ('SAME', 'VALID'), got 'same'"),
    (Conv2DWinogradAttrs(tile=4, activation="silu"), "SdConv2DWinograd: activation must be one of"),
])
def test_invalid_attrs(attrs: Conv2DWinogradAttrs, message: str) -> None:
    with pytest.raises(OpAttrError) as err:
        SPEC.encode(attrs)
    assert str(err.value).startswith(message)


def test_decode_rejects_missing_tile() -> None:
    from flatbuffers import flexbuffers

    with pytest.raises(OpAttrError, match="missing attr 'tile'"):
        SPEC.decode(bytes(flexbuffers.Dumps({"padding": "SAME"})))


def test_reference_is_torch_conv2d() -> None:
    x, w, b = random_problem((2, 7, 9, 5, 6), seed=2)
    got = SPEC.reference([x, w, b], Conv2DWinogradAttrs(tile=6, padding="SAME", activation="relu"))
    want = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(w).permute(0, 3, 1, 2),
                                      torch.from_numpy(b), padding=1).relu().permute(0, 2, 3, 1).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="SdConv2DWinograd: x"):
        SPEC.reference([x, w[:, :2], b], Conv2DWinogradAttrs(tile=4))


def test_checked_in_cpp_matrices_match_the_derivation() -> None:
    path = ROOT / "custom_ops" / "ops" / "conv2d_winograd" / "matrices.inc"
    assert path.read_text() == codegen.render(), "regenerate: python -m sdconvert.winograd.codegen > " + str(path)
