"""PNG output with generation parameters, and init-image loading for img2img.

Parameters go into two PNG text chunks: ``parameters`` in the widely read AUTOMATIC1111 layout
(prompt / "Negative prompt:" / "Steps: .., Sampler: .., CFG scale: .., Seed: .., Size: ..") and
``sdlite`` with the exact JSON, so tools and humans both find them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from sdlite.errors import SdliteError
from sdlite.png_encode import encode_png


def parameters_text(p: dict[str, Any]) -> str:
    """AUTOMATIC1111-style parameters text of a generation ``p`` (keys as in ``GenerationParams`` + extras)."""
    lines = [p.get("prompt", "")]
    if p.get("negative_prompt"):
        lines.append(f"Negative prompt: {p['negative_prompt']}")
    fields = [
        ("Steps", p.get("steps")), ("Sampler", p.get("scheduler")), ("CFG scale", p.get("guidance_scale")),
        ("Seed", p.get("seed")), ("Size", f"{p.get('width')}x{p.get('height')}"),
        ("Denoising strength", p.get("strength") if p.get("init_image") else None),
        ("Model", p.get("model")), ("Backend", p.get("backend")), ("RNG", p.get("noise")),
    ]
    lines.append(", ".join(f"{k}: {v}" for k, v in fields if v is not None))
    return "\n".join(lines)


def warm_png_writer() -> None:
    """Encodes a small image once, so that the first :func:`save_png` of a process does not pay for first use (zlib's
    first encoder, numpy's first uint8 kernels, the band threads). sdlite generate calls this while the models' first
    inferences run on their threads, off the way to the first PNG."""
    encode_png(np.zeros((256, 256, 3), dtype=np.uint8), {"sdlite": "{}"}, threads=2)


def save_png(image: np.ndarray, path: Path, params: dict[str, Any]) -> None:
    """Write uint8 ``[H, W, 3]`` ``image`` to ``path`` with ``params`` in PNG text chunks."""
    data = encode_png(image, {"parameters": parameters_text(params), "sdlite": json.dumps(params, sort_keys=True)})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as exc:
        raise SdliteError(f"cannot write {path}: {exc.strerror or exc}") from None


def read_png_parameters(path: Path) -> dict[str, Any]:
    """The ``sdlite`` JSON chunk of a PNG written by :func:`save_png`."""
    from PIL import Image

    with Image.open(path) as im:
        text = im.text.get("sdlite") if hasattr(im, "text") else None  # type: ignore[attr-defined]
    if text is None:
        raise SdliteError(f"{path} has no sdlite parameters chunk")
    return json.loads(text)


def load_init_image(path: Path, width: int, height: int) -> np.ndarray:
    """``[1, 3, height, width]`` float32 in [-1, 1]; other sizes are resized with Lanczos (as diffusers)."""
    from PIL import Image, UnidentifiedImageError

    if not Path(path).is_file():
        raise SdliteError(f"init image not found: {path}")
    try:
        with Image.open(path) as im:
            return _from_pil(im, width, height)
    except (UnidentifiedImageError, OSError) as exc:
        raise SdliteError(f"cannot read init image {path}: {exc}") from None


def _from_pil(im: Any, width: int, height: int) -> np.ndarray:
    from PIL import Image

    im = im.convert("RGB")
    if im.size != (width, height):
        im = im.resize((width, height), resample=Image.LANCZOS)
    arr = np.asarray(im, dtype=np.float32) / 255.0
    return (arr.transpose(2, 0, 1)[None] * 2.0 - 1.0).astype(np.float32)


def prepare_image(image: Any, width: int, height: int) -> np.ndarray:
    """An img2img input as the VAE encoder takes it, ``[1, 3, height, width]`` float32 in [-1, 1].

    Accepts what diffusers accepts besides torch tensors: a PIL image (any mode/size: RGB, Lanczos-resized), a
    path, a uint8 ``[H, W, 3]`` array (as PIL would give), a float ``[H, W, 3]`` array in [0, 1] (diffusers'
    ``output_type="np"``) or an already prepared ``[1, 3, H, W]`` array in [-1, 1].
    """
    from PIL import Image

    if isinstance(image, (str, Path)):
        return load_init_image(Path(image), width, height)
    if isinstance(image, Image.Image):
        return _from_pil(image, width, height)
    arr = np.asarray(image)
    if arr.ndim == 4 and arr.shape[:2] == (1, 3):
        if arr.shape[2:] != (height, width):
            raise SdliteError(f"image must be [1, 3, {height}, {width}] in [-1, 1], got {list(arr.shape)}")
        return arr.astype(np.float32)
    if arr.ndim == 4 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise SdliteError(f"image must be a PIL image, [H, W, 3] or [1, 3, H, W] array, got shape {list(arr.shape)}")
    arr = arr[..., :3]
    if arr.dtype != np.uint8:
        unit = np.clip(arr.astype(np.float32), 0.0, 1.0)
        if unit.shape[:2] == (height, width):  # used as is, like diffusers' preprocessing of float arrays
            return (unit.transpose(2, 0, 1)[None] * 2.0 - 1.0).astype(np.float32)
        arr = (unit * 255).round().astype(np.uint8)  # resized through PIL, as images are
    return _from_pil(Image.fromarray(np.ascontiguousarray(arr), mode="RGB"), width, height)
