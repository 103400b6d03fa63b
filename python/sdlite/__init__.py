"""sdlite: run Stable Diffusion 1.x models converted by sdconvert on TFLite/LiteRT backends.

Public names are imported lazily (importing ``sdlite`` loads neither numpy-heavy modules nor LiteRT):
``StableDiffusionPipeline`` (diffusers-shaped: ``from_pretrained``, ``pipe(prompt, ...)``), the schedulers under
sdlite's and diffusers' names (``DDIMScheduler``, ``PNDMScheduler``, ``EulerAncestralDiscreteScheduler``,
``DPMSolverMultistepScheduler``, ...), ``Interpreter``, ``GenerationParams``, ``CLIPTokenizer``, ``SdliteError``,
``BackendOptions``, ``make_scheduler``.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Interpreter": "sdlite.interpreter",
    "StableDiffusionPipeline": "sdlite.pipeline",
    "GenerationParams": "sdlite.pipeline",
    "GenerationResult": "sdlite.pipeline",
    "StableDiffusionPipelineOutput": "sdlite.pipeline",
    "DDIMScheduler": "sdlite.schedulers",
    "PNDMScheduler": "sdlite.schedulers",
    "EulerAncestralScheduler": "sdlite.schedulers",
    "EulerAncestralDiscreteScheduler": "sdlite.schedulers",
    "DPMSolverPlusPlus2MScheduler": "sdlite.schedulers",
    "DPMSolverMultistepScheduler": "sdlite.schedulers",
    "CLIPTokenizer": "sdlite.tokenizer",
    "SdliteError": "sdlite.errors",
    "BackendUnavailableError": "sdlite.errors",
    "BackendOptions": "sdlite.backends",
    "make_scheduler": "sdlite.schedulers",
}
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sdlite' has no attribute {name!r}")
    return getattr(import_module(module), name)
