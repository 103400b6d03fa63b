"""sdlite's PNG encoder (sdlite.png_encode): what PIL decodes is exactly the image and the text written, whether one
band or several were deflated, and bad arrays are refused with a message."""
from __future__ import annotations

import io
import zlib

import numpy as np
import pytest
from PIL import Image

from sdlite.png_encode import encode_png


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _decode(data: bytes) -> tuple[np.ndarray, dict[str, str]]:
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        assert (im.format, im.mode) == ("PNG", "RGB")
        return np.asarray(im), dict(im.text)


def _idat(data: bytes) -> bytes:
    """The concatenated IDAT payload (the zlib stream) of a PNG."""
    pos, out = 8, b""
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        if data[pos + 4 : pos + 8] == b"IDAT":
            out += data[pos + 8 : pos + 8 + n]
        pos += 12 + n
    return out


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (64, 7), (512, 512), (517, 300)])
@pytest.mark.parametrize("threads", [1, 3, 8])
def test_the_decoded_pixels_are_the_image(rng, shape, threads):
    image = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    pixels, text = _decode(encode_png(image, threads=threads))
    np.testing.assert_array_equal(pixels, image)
    assert text == {}


def test_several_bands_make_one_zlib_stream(rng):
    # A smooth image (compressible: every band's stream is short) over 8 bands: the IDAT is one zlib stream whose
    # inflated bytes are the filtered rows, its Adler-32 over all of them; PIL reads it as one image.
    y, x = np.mgrid[0:512, 0:512]
    image = np.stack([x % 256, y % 256, (x + y) % 256], axis=-1).astype(np.uint8)
    one, eight = encode_png(image, threads=1), encode_png(image, threads=8)
    assert one != eight  # the bands are separate deflate streams
    raw = zlib.decompress(_idat(eight))
    assert raw == zlib.decompress(_idat(one))
    assert len(raw) == 512 * (1 + 512 * 3) and raw[0] == 2  # each row: the "Up" filter byte, then the row
    np.testing.assert_array_equal(_decode(eight)[0], image)


def test_text_chunks_round_trip_latin1_and_any_other_character(rng):
    image = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    text = {"parameters": "a café at night\nSteps: 20", "sdlite": '{"prompt": "猫, ein Café 🐈"}'}
    data = encode_png(image, text)
    assert b"tEXtparameters\0a caf\xe9" in data  # Latin-1 text as tEXt
    assert b"iTXtsdlite\0\0\0\0\0" in data  # anything else as uncompressed UTF-8 iTXt
    assert _decode(data)[1] == text


@pytest.mark.parametrize("bad", [np.zeros((4, 4, 3), np.float32), np.zeros((4, 4), np.uint8),
                                 np.zeros((4, 4, 4), np.uint8), np.zeros((0, 4, 3), np.uint8)])
def test_anything_but_a_uint8_rgb_image_is_refused(bad):
    with pytest.raises(ValueError, match=r"encode_png takes a non-empty uint8 \[H, W, 3\] array, got"):
        encode_png(bad)
