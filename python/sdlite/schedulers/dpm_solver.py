"""DPM-Solver++(2M) (Lu et al. 2022): second-order multistep solver in data (x0) prediction, midpoint form.

Options: ``use_karras_sigmas`` (Karras et al. 2022 rho=7 noise levels, timesteps mapped back by log-sigma
interpolation and rounded). The first step (no history yet) and the final step are first order; the final
step lands on sigma = 0 (diffusers' ``final_sigmas_type="zero"``).
Deterministic: no noise is drawn. Keeps one previous x0 prediction (one latent-sized array).
"""
from __future__ import annotations

import numpy as np

from sdlite.schedulers.base import Scheduler, SchedulerConfig, check_num_steps, check_prediction_type, spaced_timesteps

KARRAS_RHO = 7.0


def karras_sigmas(sigma_min: float, sigma_max: float, num_steps: int, rho: float = KARRAS_RHO) -> np.ndarray:
    """``num_steps`` noise levels from ``sigma_max`` down to ``sigma_min``, uniform in ``sigma^(1/rho)``."""
    ramp = np.linspace(0, 1, num_steps)
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    return (hi + ramp * (lo - hi)) ** rho


def sigma_to_t(sigma: np.ndarray, log_sigmas: np.ndarray) -> np.ndarray:
    """Fractional training timestep whose sigma is ``sigma`` (piecewise-linear in log sigma)."""
    log_sigma = np.log(np.maximum(sigma, 1e-10))
    dists = log_sigma - log_sigmas[:, None]
    low = np.cumsum(dists >= 0, axis=0).argmax(axis=0).clip(max=len(log_sigmas) - 2)
    high = low + 1
    w = np.clip((log_sigmas[low] - log_sigma) / (log_sigmas[low] - log_sigmas[high]), 0, 1)
    return ((1 - w) * low + w * high).reshape(np.shape(sigma))


class DPMSolverPlusPlus2MScheduler(Scheduler):
    name = "dpmpp_2m"
    default_spacing = "linspace"

    def __init__(self, config: SchedulerConfig, use_karras_sigmas: bool = False) -> None:
        super().__init__(config)
        check_prediction_type(config, ("epsilon", "sample", "v_prediction"), self.name)
        self.use_karras_sigmas = use_karras_sigmas
        self.sigmas = np.zeros(1, dtype=np.float32)
        self._prev_x0: np.ndarray | None = None
        self._lower_order_nums = 0

    def set_timesteps(self, num_steps: int) -> None:
        check_num_steps(num_steps, self.config)
        n_train = self.config.num_train_timesteps
        spacing = self.config.timestep_spacing or self.default_spacing
        if spacing == "linspace":  # num_steps + 1 points, the last (t=0) dropped
            timesteps = np.linspace(0, n_train - 1, num_steps + 1).round()[::-1][:-1].astype(np.int64)
        elif spacing == "leading":
            ratio = n_train // (num_steps + 1)
            timesteps = (np.arange(0, num_steps + 1) * ratio).round()[::-1][:-1].astype(np.int64)
            timesteps += self.config.steps_offset
        else:
            timesteps = spaced_timesteps(self.config, num_steps, spacing).astype(np.int64)
        train_sigmas = np.asarray(((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5)
        log_sigmas = np.log(train_sigmas)
        if self.use_karras_sigmas:
            sigmas = karras_sigmas(float(train_sigmas[0]), float(train_sigmas[-1]), num_steps)
            timesteps = np.array([sigma_to_t(s, log_sigmas) for s in sigmas]).round()
        else:
            sigmas = np.interp(timesteps, np.arange(len(train_sigmas)), train_sigmas)
        self.sigmas = np.concatenate([sigmas, [0.0]]).astype(np.float32)
        self.timesteps = np.asarray(timesteps, dtype=np.int64).astype(np.float64)
        self.num_inference_steps = len(self.timesteps)
        self._prev_x0 = None
        self._lower_order_nums = 0

    @staticmethod
    def _alpha_sigma(sigma: np.float32) -> tuple[np.float32, np.float32]:
        alpha = np.float32(1) / (sigma**2 + np.float32(1)) ** 0.5
        return alpha, sigma * alpha

    def _x0(self, model_output: np.ndarray, step_index: int, sample: np.ndarray) -> np.ndarray:
        alpha, sigma = self._alpha_sigma(self.sigmas[step_index])
        if self.config.prediction_type == "epsilon":
            return (sample - sigma * model_output) / alpha
        if self.config.prediction_type == "sample":
            return model_output
        return alpha * sample - sigma * model_output  # v_prediction

    def step(
        self, model_output: np.ndarray, step_index: int, sample: np.ndarray, noise: np.ndarray | None = None
    ) -> np.ndarray:
        n = len(self.timesteps)
        x0 = self._x0(model_output, step_index, sample)
        # First order without history, and on the final step (its target sigma is 0: lambda_t is infinite).
        first_order = self._lower_order_nums < 1 or step_index == n - 1
        alpha_t, sigma_t = self._alpha_sigma(self.sigmas[step_index + 1])
        alpha_s0, sigma_s0 = self._alpha_sigma(self.sigmas[step_index])
        with np.errstate(divide="ignore"):  # sigma_t == 0 on the final step: h = inf, exp(-h) = 0
            lambda_t = np.log(alpha_t) - np.log(sigma_t)
        lambda_s0 = np.log(alpha_s0) - np.log(sigma_s0)
        h = lambda_t - lambda_s0
        phi = alpha_t * (np.exp(-h) - np.float32(1))
        if first_order:
            prev = (sigma_t / sigma_s0) * sample - phi * x0
        else:
            assert self._prev_x0 is not None
            alpha_s1, sigma_s1 = self._alpha_sigma(self.sigmas[step_index - 1])
            lambda_s1 = np.log(alpha_s1) - np.log(sigma_s1)
            r0 = (lambda_s0 - lambda_s1) / h
            d1 = (np.float32(1) / r0) * (x0 - self._prev_x0)
            prev = (sigma_t / sigma_s0) * sample - phi * x0 - np.float32(0.5) * phi * d1
        self._prev_x0 = x0
        self._lower_order_nums = min(self._lower_order_nums + 1, 2)
        return prev.astype(np.float32)

    def add_noise(self, original: np.ndarray, noise: np.ndarray, step_index: int) -> np.ndarray:
        alpha, sigma = self._alpha_sigma(self.sigmas[step_index])
        return (alpha * original + sigma * noise).astype(np.float32)
