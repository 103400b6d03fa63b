"""Numpy diffusion schedulers (one file each) and the name -> scheduler registry used by the CLI.

Names: ``pndm`` (SD 1.x default, PLMS), ``ddim``, ``euler_a`` (Euler ancestral), ``dpmpp_2m``
(DPM-Solver++ 2M) and ``dpmpp_2m_karras`` (same with Karras sigmas). The classes also go by diffusers' names
(``EulerAncestralDiscreteScheduler``, ``DPMSolverMultistepScheduler``), so diffusers code swaps samplers the same
way: ``pipe.scheduler = DPMSolverMultistepScheduler.from_config(pipe.scheduler.config, use_karras_sigmas=True)``.
"""
from __future__ import annotations

from typing import Callable

from sdlite.errors import SdliteError
from sdlite.schedulers.base import Scheduler, SchedulerConfig
from sdlite.schedulers.ddim import DDIMScheduler
from sdlite.schedulers.dpm_solver import DPMSolverPlusPlus2MScheduler
from sdlite.schedulers.euler_ancestral import EulerAncestralScheduler
from sdlite.schedulers.pndm import PNDMScheduler

SCHEDULERS: dict[str, Callable[[SchedulerConfig], Scheduler]] = {
    "pndm": PNDMScheduler,
    "ddim": DDIMScheduler,
    "euler_a": EulerAncestralScheduler,
    "dpmpp_2m": DPMSolverPlusPlus2MScheduler,
    "dpmpp_2m_karras": lambda cfg: DPMSolverPlusPlus2MScheduler(cfg, use_karras_sigmas=True),
}


# diffusers' class names for the same samplers (diffusers' DPMSolverMultistepScheduler defaults to 2M, DPM-Solver++)
EulerAncestralDiscreteScheduler = EulerAncestralScheduler
DPMSolverMultistepScheduler = DPMSolverPlusPlus2MScheduler


def scheduler_name(scheduler: Scheduler) -> str:
    """The registry name of ``scheduler`` (what ``sdlite generate --scheduler`` and the PNG metadata call it)."""
    if isinstance(scheduler, DPMSolverPlusPlus2MScheduler) and scheduler.use_karras_sigmas:
        return "dpmpp_2m_karras"
    return scheduler.name


def make_scheduler(name: str, config: SchedulerConfig | None = None) -> Scheduler:
    """Scheduler ``name`` over the training noise schedule ``config`` (SD 1.x defaults when None)."""
    try:
        factory = SCHEDULERS[name]
    except KeyError:
        raise SdliteError(f"unknown scheduler {name!r}; choose one of {', '.join(SCHEDULERS)}") from None
    return factory(config or SchedulerConfig())


__all__ = [
    "SCHEDULERS", "DDIMScheduler", "DPMSolverMultistepScheduler", "DPMSolverPlusPlus2MScheduler",
    "EulerAncestralDiscreteScheduler", "EulerAncestralScheduler", "PNDMScheduler", "Scheduler", "SchedulerConfig",
    "make_scheduler", "scheduler_name",
]
