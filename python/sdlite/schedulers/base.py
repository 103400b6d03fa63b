"""Shared pieces of the numpy diffusion schedulers: config, noise schedule, the scheduler interface.

Numerics follow diffusers' float32 torch arithmetic so results agree to ~1e-7 relative: betas and all
per-step scalars are float32; ``alphas_cumprod`` is accumulated in float64 and rounded to float32 (torch's
CPU cumprod accumulates in double). Latents stay float32 numpy arrays of any shape (batch = leading axis).

Interface trade-off: schedulers are driven by *step index* (position in ``timesteps``), not by timestep value
as in diffusers, so repeated timesteps (PNDM's PLMS warm-up, Karras rounding) and img2img start offsets need
no value lookup; the pipeline passes ``timesteps[i]`` to the UNet itself.
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from sdlite.errors import SdliteError


@dataclass(frozen=True)
class SchedulerConfig:
    """The subset of a diffusers ``scheduler_config.json`` the numpy schedulers use (SD 1.x defaults).

    ``timestep_spacing=None`` means "the scheduler's own diffusers default" (leading for PNDM/DDIM,
    linspace for Euler ancestral / DPM-Solver++), which is what diffusers does for SD 1.x configs.
    """

    num_train_timesteps: int = 1000
    beta_start: float = 0.00085
    beta_end: float = 0.012
    beta_schedule: str = "scaled_linear"
    trained_betas: tuple[float, ...] | None = None
    prediction_type: str = "epsilon"
    steps_offset: int = 1
    set_alpha_to_one: bool = False
    skip_prk_steps: bool = True
    clip_sample: bool = False
    clip_sample_range: float = 1.0
    timestep_spacing: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SchedulerConfig":
        """Build from a diffusers config dict; keys this runtime does not use are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        if kwargs.get("trained_betas") is not None:
            kwargs["trained_betas"] = tuple(float(b) for b in kwargs["trained_betas"])
        return cls(**kwargs)


def linspace_f32(start: float, end: float, n: int) -> np.ndarray:
    """float32 ``linspace`` rounded like torch's CPU kernel (bit-identical to ``torch.linspace(..., float32)``).

    torch computes a float32 step, then ``start + step*i`` for the first half and ``end - step*(n-1-i)`` for
    the second, each a single fused multiply-add rounding; numpy's float64-then-cast differs by 1 ulp in
    ~30% of the entries, which shows up as ~1e-6 relative drift of the latents over 50 steps.
    """
    f32 = np.float32
    s, e = f32(start), f32(end)
    step = f32((e - s) / f32(max(n - 1, 1)))
    i = np.arange(n, dtype=np.float64)
    low = (np.float64(s) + np.float64(step) * i).astype(f32)  # exact in float64, one rounding to float32
    high = (np.float64(e) - np.float64(step) * (n - 1 - i)).astype(f32)
    return np.where(i < n // 2, low, high)


def make_betas(cfg: SchedulerConfig) -> np.ndarray:
    """float32 betas of the training noise schedule."""
    n = cfg.num_train_timesteps
    if cfg.trained_betas is not None:
        return np.asarray(cfg.trained_betas, dtype=np.float32)
    if cfg.beta_schedule == "linear":
        return linspace_f32(cfg.beta_start, cfg.beta_end, n)
    if cfg.beta_schedule == "scaled_linear":
        return linspace_f32(cfg.beta_start**0.5, cfg.beta_end**0.5, n) ** 2
    if cfg.beta_schedule == "squaredcos_cap_v2":
        def alpha_bar(t: float) -> float:
            return float(np.cos((t + 0.008) / 1.008 * np.pi / 2) ** 2)

        betas = [min(1 - alpha_bar((i + 1) / n) / alpha_bar(i / n), 0.999) for i in range(n)]
        return np.asarray(betas, dtype=np.float32)
    raise SdliteError(f"unsupported beta_schedule {cfg.beta_schedule!r} (linear, scaled_linear, squaredcos_cap_v2)")


def make_alphas_cumprod(betas: np.ndarray) -> np.ndarray:
    """float32 cumulative product of ``1 - betas`` (accumulated in float64)."""
    return np.cumprod((np.float32(1.0) - betas).astype(np.float64)).astype(np.float32)


def spaced_timesteps(cfg: SchedulerConfig, num_steps: int, default_spacing: str) -> np.ndarray:
    """Descending float64 timesteps for ``num_steps`` inference steps (not rounded; callers round/cast)."""
    n = cfg.num_train_timesteps
    spacing = cfg.timestep_spacing or default_spacing
    if spacing == "linspace":
        return np.linspace(0, n - 1, num_steps)[::-1].copy()
    if spacing == "leading":
        ratio = n // num_steps
        return (np.arange(0, num_steps) * ratio).round()[::-1].astype(np.float64) + cfg.steps_offset
    if spacing == "trailing":
        ratio = n / num_steps
        return np.round(np.arange(n, 0, -ratio)) - 1
    raise SdliteError(f"unsupported timestep_spacing {spacing!r} (linspace, leading, trailing)")


def check_num_steps(num_steps: int, cfg: SchedulerConfig) -> None:
    if not 1 <= num_steps <= cfg.num_train_timesteps:
        raise SdliteError(f"steps must be in [1, {cfg.num_train_timesteps}], got {num_steps}")


def check_prediction_type(cfg: SchedulerConfig, supported: tuple[str, ...], name: str) -> None:
    if cfg.prediction_type not in supported:
        raise SdliteError(f"scheduler {name} does not support prediction_type {cfg.prediction_type!r}")


class Scheduler(ABC):
    """A numpy sampler. Call :meth:`set_timesteps`, then per step ``i``: ``scale_model_input`` -> UNet -> ``step``.

    ``timesteps`` (float64 array) holds the UNet timestep of each step; its length is the number of UNet
    evaluations (PNDM does ``num_steps + 1``). ``stochastic`` schedulers need a ``noise`` array per step.
    """

    name: ClassVar[str]
    default_spacing: ClassVar[str] = "leading"

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.betas = make_betas(config)
        self.alphas_cumprod = make_alphas_cumprod(self.betas)
        self.timesteps = np.zeros(0, dtype=np.float64)
        self.num_inference_steps = 0

    @classmethod
    def from_config(cls, config: SchedulerConfig | Mapping[str, Any], **kwargs: Any) -> "Scheduler":
        """This scheduler over another one's noise schedule, as diffusers swaps samplers:
        ``pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config)``. ``config`` may also be a diffusers
        ``scheduler_config.json`` dict; ``kwargs`` are this class's options (e.g. ``use_karras_sigmas=True``)."""
        cfg = config if isinstance(config, SchedulerConfig) else SchedulerConfig.from_dict(dict(config))
        return cls(cfg, **kwargs)

    @property
    def stochastic(self) -> bool:
        """True when :meth:`step` needs a fresh standard-normal ``noise`` array each step."""
        return False

    @property
    def init_noise_sigma(self) -> np.float32:
        """Factor applied to unit Gaussian noise to get the initial latents of text-to-image."""
        return np.float32(1.0)

    @abstractmethod
    def set_timesteps(self, num_steps: int) -> None:
        """Compute ``timesteps`` for ``num_steps`` inference steps and reset the solver state."""

    def scale_model_input(self, sample: np.ndarray, step_index: int) -> np.ndarray:
        """UNet input for ``sample`` at step ``step_index`` (identity except for sigma-space samplers)."""
        return sample

    @abstractmethod
    def step(
        self, model_output: np.ndarray, step_index: int, sample: np.ndarray, noise: np.ndarray | None = None
    ) -> np.ndarray:
        """Latents after step ``step_index`` given the UNet's (guided) ``model_output``."""

    def add_noise(self, original: np.ndarray, noise: np.ndarray, step_index: int) -> np.ndarray:
        """Forward-diffuse ``original`` to the noise level of ``timesteps[step_index]`` (img2img start)."""
        t = int(self.timesteps[step_index])
        a = self.alphas_cumprod[t]
        return (a**0.5 * original + (np.float32(1.0) - a) ** 0.5 * noise).astype(np.float32)

    def img2img_start(self, num_steps: int, strength: float) -> int:
        """Index in ``timesteps`` where img2img starts for ``strength`` in (0, 1] (diffusers' rule)."""
        init = min(int(num_steps * strength), num_steps)
        return max(num_steps - init, 0)
