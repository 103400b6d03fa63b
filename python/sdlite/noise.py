"""Random streams for generation: one independent standard-normal stream per image.

Image ``k`` of a run with seed ``s`` draws from its own stream seeded ``s + k``, so any image can be
re-generated alone (``--seed s+k --num-images 1``). Within a stream, draws happen in the order diffusers
uses with a per-image generator list: img2img posterior sample, initial/added noise, then per-step noise
of stochastic samplers. Any object with ``randn(shape)`` can stand in.

Two streams by name (``sdlite generate --noise``):

- ``numpy`` (default): numpy's PCG64 (``np.random.Generator(np.random.PCG64(seed)).standard_normal``,
  float32). Needs nothing beyond numpy; its numbers are not torch's, so a seed gives a different image than
  diffusers with the same seed.
- ``torch``: ``torch.randn(shape, generator=torch.Generator().manual_seed(seed))`` on the CPU, what diffusers'
  ``randn_tensor`` draws with a CPU generator. ``--seed s --noise torch`` reproduces
  ``pipe(..., generator=torch.Generator().manual_seed(s))`` (for N images: ``generator=[torch.Generator()
  .manual_seed(s + k) for k in range(N)]``) up to the converted models' float error. Needs torch installed;
  a CUDA generator draws other numbers.
"""
from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any, Protocol, Union

import numpy as np

from sdlite.errors import SdliteError


class NoiseSource(Protocol):
    def randn(self, shape: tuple[int, ...]) -> np.ndarray:
        """float32 standard-normal array of ``shape``."""
        ...


class NumpyNoise:
    """PCG64 standard-normal stream."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def randn(self, shape: tuple[int, ...]) -> np.ndarray:
        return self._rng.standard_normal(shape, dtype=np.float32)


class TorchNoise:
    """torch's CPU generator (module docstring): the stream diffusers draws from with ``torch.Generator()``."""

    def __init__(self, seed: int) -> None:
        import torch

        self.seed = seed
        self._torch = torch
        self._gen = torch.Generator().manual_seed(seed)

    def randn(self, shape: tuple[int, ...]) -> np.ndarray:
        return self._torch.randn(shape, generator=self._gen, dtype=self._torch.float32).numpy()


NOISE_KINDS = ("numpy", "torch")


def per_image_noise(seed: int, num_images: int, kind: str = "numpy") -> list[NoiseSource]:
    """Stream ``seed + k`` of ``kind`` (``numpy`` or ``torch``) for each image ``k``."""
    if kind == "torch":
        try:
            import torch  # noqa: F401 - only to say clearly that it is missing
        except ImportError:
            raise SdliteError("--noise torch needs torch installed (pip install torch); the default "
                              "--noise numpy does not") from None
        return [TorchNoise(seed + k) for k in range(num_images)]
    if kind != "numpy":
        raise SdliteError(f"--noise must be one of {', '.join(NOISE_KINDS)}, got {kind!r}")
    return [NumpyNoise(seed + k) for k in range(num_images)]


def draw(sources: list[NoiseSource], shape_per_image: tuple[int, ...]) -> np.ndarray:
    """Stack one draw of ``shape_per_image`` (leading dim 1) from each image's stream: ``[N, ...]``."""
    return np.concatenate([np.asarray(s.randn(shape_per_image), dtype=np.float32) for s in sources], axis=0)


class GeneratorNoise:
    """A caller's ``numpy.random.Generator`` as a noise stream (draws advance the caller's generator)."""

    def __init__(self, generator: np.random.Generator) -> None:
        self.generator = generator

    def randn(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.generator.standard_normal(shape, dtype=np.float32)


#: What ``pipe(..., generator=...)`` takes: a seed, a numpy Generator, any ``randn(shape)`` source, or one per image.
GeneratorLike = Union[int, np.random.Generator, NoiseSource, Sequence[Any]]


def _one(generator: Any) -> tuple[NoiseSource, int | None]:
    if isinstance(generator, (bool, np.bool_)):
        raise SdliteError(f"generator must be a seed, a numpy Generator or a list of them, got {generator!r}")
    if isinstance(generator, (int, np.integer)):
        if generator < 0:
            raise SdliteError(f"seed must be >= 0, got {generator}")
        return NumpyNoise(int(generator)), int(generator)
    if isinstance(generator, np.random.Generator):
        return GeneratorNoise(generator), None
    if callable(getattr(generator, "randn", None)):
        return generator, None
    raise SdliteError(f"generator must be a seed, a numpy Generator or a list of them, got {type(generator).__name__}")


def noise_sources(generator: GeneratorLike | None, num_images: int) -> tuple[list[NoiseSource], list[int | None]]:
    """One noise stream per image from ``generator`` and the seed of each (None where not a seed).

    A seed ``s`` gives image ``k`` the stream of seed ``s + k``, exactly what ``sdlite generate --seed s`` draws.
    A single numpy Generator (or ``randn`` source) is shared: the images draw from it one after the other, as
    diffusers does with one generator. A list gives each image its own entry. ``None`` picks a random seed and
    reports it.
    """
    if generator is None:
        generator = secrets.randbelow(2**31)
    if isinstance(generator, (list, tuple)):
        if len(generator) != num_images:
            raise SdliteError(f"got {len(generator)} generators for {num_images} images; give one per image")
        pairs = [_one(g) for g in generator]
        return [src for src, _ in pairs], [seed for _, seed in pairs]
    source, seed = _one(generator)
    if seed is not None:
        return per_image_noise(seed, num_images), [seed + k for k in range(num_images)]
    return [source] * num_images, [None] * num_images
