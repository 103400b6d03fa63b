"""Random streams for generation: one independent standard-normal stream per image.

Image ``k`` of a run with seed ``s`` draws from its own stream seeded ``s + k``, so any image can be
re-generated alone (``--seed s+k --num-images 1``). Within a stream, draws happen in the order diffusers
uses with a per-image generator list: img2img posterior sample, initial/added noise, then per-step noise
of stochastic samplers. Any object with ``randn(shape)`` can stand in (tests plug torch generators in to
reproduce diffusers exactly); the default is numpy's PCG64, which does not reproduce torch's numbers.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np


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


def per_image_noise(seed: int, num_images: int) -> list[NoiseSource]:
    return [NumpyNoise(seed + k) for k in range(num_images)]


def draw(sources: list[NoiseSource], shape_per_image: tuple[int, ...]) -> np.ndarray:
    """Stack one draw of ``shape_per_image`` (leading dim 1) from each image's stream: ``[N, ...]``."""
    return np.concatenate([np.asarray(s.randn(shape_per_image), dtype=np.float32) for s in sources], axis=0)
