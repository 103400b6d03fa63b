"""Text-to-image and image-to-image with a converted SD 1.x folder: tokenizer -> text encoder -> UNet loop
with classifier-free guidance and a numpy scheduler -> VAE decoder.

Models are exported with fixed shapes, so the pipeline adapts to them instead of resizing them:
* the UNet batch ``B`` is ``cfg_batch`` (1 or 2). Each step's work items - ``(latent, uncond)`` and
  ``(latent, cond)`` per image with CFG, ``(latent, cond)`` without - are packed ``B`` at a time, so a
  batch-2 UNet runs ``[uncond, cond]`` in one call (diffusers' layout) and a batch-1 UNet makes two calls;
* the text encoder batch is read from its input shape and prompts are packed the same way;
* VAE decoder/encoder run one image at a time.
Height/width must equal the exported size (checked, one-line error otherwise).

Numerics follow diffusers' ``StableDiffusionPipeline``/``StableDiffusionImg2ImgPipeline`` step for step
(same guidance formula, ``init_noise_sigma`` scaling, img2img start index, posterior sampling, uint8
rounding), so with the same weights, initial latents and noise the images agree to fp32 accuracy.

Two ways in: ``pipe(prompt, num_inference_steps=..., generator=seed, ...)`` is shaped like diffusers' call
(keywords, ``pipe.scheduler`` swapped with ``from_config``, an output with ``.images`` of PIL images) and gives
the same pixels as ``sdlite generate`` with the same seed; :meth:`StableDiffusionPipeline.generate` takes a
:class:`GenerationParams` and returns everything (uint8 arrays, final latents, timings, placement).
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, overload

import numpy as np

from sdlite.backends import BackendOptions
from sdlite.errors import SdliteError
from sdlite.interpreter import Interpreter
from sdlite.noise import GeneratorLike, NoiseSource, draw, noise_sources, per_image_noise
from sdlite.runner import ModelRunner
from sdlite.schedulers import SCHEDULERS, PNDMScheduler, Scheduler, SchedulerConfig, make_scheduler, scheduler_name
from sdlite.tokenizer import CLIPTokenizer

OUTPUT_TYPES = ("pil", "np")


MAX_STEPS = 1000  # the schedulers' num_train_timesteps: more steps than training timesteps repeat timesteps
MAX_IMAGES = 1000
MAX_GUIDANCE = 1000.0  # far beyond any useful scale (SD uses 1..20); larger ones overflow float32 latents
MAX_SEED = 2**63 - 1


class NonFiniteError(SdliteError):
    """A model produced NaN or Inf during generation (broken weights, a numerically unstable backend...)."""


def check_finite(array: np.ndarray, what: str) -> None:
    """Raise :class:`NonFiniteError` naming ``what`` unless every value of ``array`` is finite: a NaN latent would
    otherwise end as a silently black image."""
    if not np.isfinite(array).all():
        bad = int(array.size - np.count_nonzero(np.isfinite(array)))
        raise NonFiniteError(f"{what} has {bad} non-finite value(s) (NaN or Inf) of {array.size}; stopping")


@dataclass(frozen=True)
class GenerationParams:
    """What to generate. ``height``/``width`` default to the exported size (and must equal it)."""

    prompt: str
    negative_prompt: str = ""
    steps: int = 25
    guidance_scale: float = 7.5
    seed: int = 0
    height: int | None = None
    width: int | None = None
    num_images: int = 1
    scheduler: str = "pndm"
    strength: float = 0.8  # img2img only: fraction of the schedule re-run on the init image

    def validate(self, exported_height: int, exported_width: int) -> None:
        if self.scheduler not in SCHEDULERS:
            raise SdliteError(f"unknown scheduler {self.scheduler!r}; choose one of {', '.join(SCHEDULERS)}")
        if not 1 <= self.steps <= MAX_STEPS:
            raise SdliteError(f"steps must be in 1..{MAX_STEPS}, got {self.steps}")
        if not 1 <= self.num_images <= MAX_IMAGES:
            raise SdliteError(f"num_images must be in 1..{MAX_IMAGES}, got {self.num_images}")
        if not (math.isfinite(self.guidance_scale) and 0 <= self.guidance_scale <= MAX_GUIDANCE):
            raise SdliteError(f"guidance scale must be a finite number in 0..{MAX_GUIDANCE:g}, got {self.guidance_scale}")
        if not (math.isfinite(self.strength) and 0.0 < self.strength <= 1.0):
            raise SdliteError(f"strength must be in (0, 1], got {self.strength}")
        if not 0 <= self.seed <= MAX_SEED:
            raise SdliteError(f"seed must be in 0..{MAX_SEED}, got {self.seed}")
        for label, value, exported in (("height", self.height, exported_height), ("width", self.width, exported_width)):
            if value is None:
                continue
            if value <= 0 or value % 8:
                raise SdliteError(f"{label} must be a positive multiple of 8, got {value}")
            if value != exported:
                raise SdliteError(
                    f"{label} {value} differs from the exported size {exported_width}x{exported_height} "
                    "(models have fixed shapes; re-export with the size you want)"
                )

    @property
    def do_cfg(self) -> bool:
        return self.guidance_scale > 1.0


@dataclass
class Timings:
    """Wall-clock seconds per stage (model times include input/output copies)."""

    text_encoder_s: float = 0.0
    unet_step_s: list[float] = field(default_factory=list)  # per denoising step, all UNet calls of the step
    unet_calls: int = 0
    scheduler_s: float = 0.0
    vae_encode_s: float = 0.0
    vae_decode_s: list[float] = field(default_factory=list)  # per image
    total_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The fields plus totals. ``unet_step_mean_s`` averages every step, the first included, which on a fresh
        interpreter also carries our GPU delegate's one-time set-up; ``unet_first_step_s``,
        ``unet_step_steady_mean_s`` (the steps after the first) and ``unet_setup_s`` (first minus steady, None
        with a single step) keep them apart."""
        d = asdict(self)
        steps = self.unet_step_s
        d["unet_total_s"] = float(sum(steps))
        d["unet_step_mean_s"] = float(np.mean(steps)) if steps else 0.0
        d["unet_first_step_s"] = float(steps[0]) if steps else 0.0
        steady = float(np.mean(steps[1:])) if len(steps) > 1 else None
        d["unet_step_steady_mean_s"] = steady
        d["unet_setup_s"] = max(0.0, float(steps[0]) - steady) if steady is not None else None
        d["vae_decode_total_s"] = float(sum(self.vae_decode_s))
        return d


@dataclass
class GenerationResult:
    images: list[np.ndarray]  # uint8 [H, W, 3] per image
    latents: np.ndarray  # final latents [N, C, h, w] (before 1/scaling_factor)
    params: GenerationParams
    timings: Timings
    placement: dict[str, str]
    seeds: list[int]
    unit_images: list[np.ndarray] = field(default_factory=list)  # float32 [H, W, 3] in [0, 1], before rounding


@dataclass
class StableDiffusionPipelineOutput:
    """What ``pipe(prompt, ...)`` returns, shaped like diffusers' output.

    ``images``: PIL images, or with ``output_type="np"`` a float32 ``[N, H, W, 3]`` array in [0, 1] (diffusers'
    convention). ``nsfw_content_detected`` is always None: no safety checker is converted. sdlite's extras:
    ``seeds`` (per image; None where a Generator was given), ``timings`` and ``placement`` (which executor ran
    which ops).
    """

    images: Any
    nsfw_content_detected: list[bool] | None = None
    seeds: list[int | None] = field(default_factory=list)
    timings: Timings | None = None
    placement: dict[str, str] = field(default_factory=dict)


def _pick(runner: ModelRunner, preferred: str, rank: int | None = None, kind: str | None = None,
          outputs: bool = False) -> str:
    """Name of the input (or output) playing a role: the preferred name, else the unique one of that rank/kind."""
    specs = runner.outputs if outputs else runner.inputs
    if preferred in specs:
        return preferred
    cands = [n for n, s in specs.items()
             if (rank is None or len(s.shape) == rank or (rank == 1 and len(s.shape) == 0))
             and (kind is None or s.dtype.kind == kind)]
    if len(cands) != 1:
        what = "output" if outputs else "input"
        raise SdliteError(
            f"{runner.path.name}: cannot tell which {what} is {preferred!r} (has {sorted(specs)}); "
            "fix the manifest/export names"
        )
    return cands[0]


def warm_progress_bars() -> None:
    """Imports tqdm (asyncio with it) and makes its write lock (multiprocessing with it): the first denoising loop of
    a process paid for those, 35-45 ms, even with its bar disabled. Called while the models' first inferences run on
    their threads, off the way to the first image."""
    from tqdm.auto import tqdm

    tqdm.get_lock()


def to_unit(image: np.ndarray) -> np.ndarray:
    """``[1, 3, H, W]`` in ~[-1, 1] -> float32 ``[H, W, 3]`` in [0, 1] (diffusers' ``output_type="np"``)."""
    return np.clip(image[0].transpose(1, 2, 0) / 2 + 0.5, 0.0, 1.0).astype(np.float32)


def to_uint8(image: np.ndarray) -> np.ndarray:
    """``[1, 3, H, W]`` in ~[-1, 1] -> uint8 ``[H, W, 3]`` (diffusers' postprocess rounding)."""
    return unit_to_uint8(to_unit(image))


def unit_to_uint8(unit: np.ndarray) -> np.ndarray:
    """float32 ``[H, W, 3]`` in [0, 1] (:func:`to_unit`) -> uint8 (diffusers' postprocess rounding)."""
    return (unit * 255).round().astype(np.uint8)


def _padded_batches(rows: list[np.ndarray], batch: int) -> list[tuple[list[np.ndarray], int]]:
    """``rows`` in batches of ``batch``, the last padded with copies of its last row; each with its real row count."""
    out = []
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        out.append((chunk + [chunk[-1]] * (batch - len(chunk)), len(chunk)))
    return out


class StableDiffusionPipeline:
    """Generate images with a converted folder, diffusers-style::

        pipe = StableDiffusionPipeline.from_pretrained("out/tiny", backend="cpu")
        image = pipe("a photo of a cat", num_inference_steps=20, generator=1).images[0]

    ``pipe.scheduler`` is the sampler ``pipe(...)`` uses (PNDM, the SD 1.x default, as ``sdlite generate``);
    replace it like in diffusers: ``pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config)``.
    """

    def __init__(self, interpreter: Interpreter, tokenizer: CLIPTokenizer | None = None,
                 scheduler_config: SchedulerConfig | None = None,
                 delegate_options: Mapping[str, Any] | None = None, low_memory: bool = False) -> None:
        self.interpreter = interpreter
        m = interpreter.manifest
        self.manifest = m
        self.tokenizer = tokenizer or CLIPTokenizer(m.tokenizer_vocab, m.tokenizer_merges, m.max_length)
        self.scheduler_config = scheduler_config or SchedulerConfig.from_dict(m.scheduler_dict())
        self.scheduler: Scheduler = PNDMScheduler(self.scheduler_config)
        self.delegate_options: dict[str, Any] = dict(delegate_options or {})
        self.progress_bar = True
        # One model on the device at a time: the text encoder is released before the UNet loads, the UNet before
        # the VAE (Apple's ml-stable-diffusion reduceMemory). Peak GPU memory becomes the largest model's instead
        # of the sum; each image reloads the models it runs (cheap with the delegate's persistent cache).
        self.low_memory = low_memory
        # The last prompts' text embeddings: the next image of the same prompts (sdlite generate --num-images,
        # diffusers' num_images_per_prompt) runs no text encoder.
        self._embeds: tuple[tuple[str, ...], np.ndarray] | None = None
        # Those embeddings stacked as the UNet's calls take them (_embeds_batches).
        self._embeds_stacked: tuple[np.ndarray | None, np.ndarray, int, int, list[np.ndarray]] | None = None

    def set_progress_bar_config(self, disable: bool = False) -> None:
        """diffusers' switch for the denoising progress bar (``disable=True``: none)."""
        self.progress_bar = not disable

    @classmethod
    def from_folder(cls, folder: Path | str, backend: str | BackendOptions = "cpu") -> "StableDiffusionPipeline":
        return cls(Interpreter(folder, backend))

    @classmethod
    def from_pretrained(cls, folder: Path | str, backend: str | BackendOptions = "cpu",
                        delegate_options: Mapping[str, Any] | None = None,
                        num_threads: int | None = None, low_memory: bool = False) -> "StableDiffusionPipeline":
        """Open a folder written by ``sdconvert`` (not a hub id: nothing is downloaded).

        ``backend``: ``cpu`` (XNNPACK + our delegate's CPU kernels for ``Sd*`` ops), ``opencl``, ``gl`` (our
        delegate on the GPU), ``litert-gpu``, ``litert-cpu``, or a :class:`BackendOptions`. ``delegate_options``:
        our delegate's options as ``load_delegate`` takes them (``{"tensor_cores": "off"}``; typed values work
        too), checked now. Models load lazily, on first use. ``low_memory``: one model on the device at a time
        (:attr:`low_memory`).
        """
        from sdlite import native

        if not Path(folder).exists():
            raise SdliteError(f"model folder not found: {folder} (from_pretrained opens a folder written by "
                              "sdconvert; it downloads nothing)")
        options = backend if isinstance(backend, BackendOptions) else BackendOptions(name=backend,
                                                                                   num_threads=num_threads)
        checked = native.typed_options(delegate_options or {})
        return cls(Interpreter(folder, options), delegate_options=checked, low_memory=low_memory)

    def close(self) -> None:
        self.interpreter.close()

    def __enter__(self) -> "StableDiffusionPipeline":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _file(self, name: str) -> str:
        spec = self.manifest.models.get(name)
        return spec.path.name if spec is not None else f"{name}.tflite"

    # -- stages -------------------------------------------------------------------------------------------
    def encode_prompts(self, prompts: list[str]) -> np.ndarray:
        """``[len(prompts), 77, D]`` text embeddings (packed into the text encoder's fixed batch)."""
        te = self.interpreter.runner("text_encoder")
        ids_name = _pick(te, "input_ids", rank=2, kind="i")
        out_name = _pick(te, "last_hidden_state", rank=3, outputs=True)
        batch, length = te.inputs[ids_name].shape
        if length != self.tokenizer.max_length:
            raise SdliteError(f"text encoder takes {length} tokens, tokenizer makes {self.tokenizer.max_length}")
        ids = self.tokenizer(prompts)
        rows = []
        for start in range(0, len(ids), batch):
            chunk = ids[start : start + batch]
            pad = batch - len(chunk)
            if pad:
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], pad, axis=0)])
            rows.append(te.run(**{ids_name: chunk})[out_name][: batch - pad])
        return np.concatenate(rows).astype(np.float32)

    def prompt_embeds(self, prompts: list[str]) -> np.ndarray:
        """:meth:`encode_prompts`, or the previous call's (read-only) result when the prompts are the same."""
        key = tuple(prompts)
        if self._embeds is not None and self._embeds[0] == key:
            return self._embeds[1]
        embeds = self.encode_prompts(prompts)
        check_finite(embeds, f"the text embedding from {self._file('text_encoder')}")
        embeds.setflags(write=False)
        self._embeds = (key, embeds)
        return embeds

    def _unet_io(self) -> tuple[ModelRunner, str, str, str, str]:
        unet = self.interpreter.runner("unet")
        sample = _pick(unet, "sample", rank=4)
        timestep = _pick(unet, "timestep", rank=1)
        ehs = _pick(unet, "encoder_hidden_states", rank=3)
        out = _pick(unet, "noise_pred", rank=4, outputs=True)
        return unet, sample, timestep, ehs, out

    def predict_noise(self, latents_in: np.ndarray, t: float, uncond: np.ndarray | None, cond: np.ndarray,
                      guidance_scale: float) -> tuple[np.ndarray, int]:
        """Guided noise prediction for ``[N, C, h, w]`` latents; returns it and the number of UNet calls."""
        unet, s_name, t_name, e_name, o_name = self._unet_io()
        batch = unet.inputs[s_name].shape[0]
        t_arr = np.full(unet.inputs[t_name].shape, t, dtype=unet.inputs[t_name].dtype)
        latents = [x for x in latents_in for _ in range(1 if uncond is None else 2)]  # each with its embedding
        embeds = self._embeds_batches(uncond, cond, latents_in.shape[0], batch)
        preds: list[np.ndarray] = []
        calls = 0
        for chunk, real in _padded_batches(latents, batch):
            out = unet.run(**{s_name: np.stack(chunk), t_name: t_arr, e_name: embeds[calls]})[o_name]
            calls += 1
            preds.extend(out[:real])
        pred = np.stack(preds)
        if uncond is None:
            return pred, calls
        p_uncond, p_cond = pred[0::2], pred[1::2]
        return p_uncond + np.float32(guidance_scale) * (p_cond - p_uncond), calls

    def _embeds_batches(self, uncond: np.ndarray | None, cond: np.ndarray, n_latents: int,
                        batch: int) -> list[np.ndarray]:
        """The ``encoder_hidden_states`` input of each UNet call of one step: per latent its unconditional (with CFG)
        then its conditional embedding, in batches of ``batch`` (the last padded with its last row). Every step of an
        image feeds the same ones, so read-only embeddings (those :meth:`prompt_embeds` returns) are stacked once:
        the CFG pair is ~0.5 MB copied per UNet call otherwise."""
        cached = self._embeds_stacked
        if cached is not None and cached[0] is uncond and cached[1] is cond and cached[2:4] == (n_latents, batch):
            return cached[4]
        rows = [e for _ in range(n_latents) for e in ((cond[0],) if uncond is None else (uncond[0], cond[0]))]
        out = [np.stack(chunk) for chunk, _ in _padded_batches(rows, batch)]
        if not cond.flags.writeable and (uncond is None or not uncond.flags.writeable):  # cannot change under us
            self._embeds_stacked = (uncond, cond, n_latents, batch, out)
        return out

    def encode_image(self, image: np.ndarray, sources: list[NoiseSource]) -> tuple[np.ndarray, float]:
        """Scaled latents ``[N, C, h, w]`` of ``image`` (``[1, 3, H, W]`` in [-1, 1]).

        One VAE encode; one posterior sample per image, each from that image's noise stream.
        """
        if not self.interpreter.has_model("vae_encoder"):
            raise SdliteError(f"img2img needs vae_encoder.tflite, not in {self.manifest.folder}")
        enc = self.interpreter.runner("vae_encoder")
        in_name = _pick(enc, "image", rank=4)
        out_name = _pick(enc, "moments", rank=4, outputs=True)
        if tuple(image.shape) != enc.inputs[in_name].shape:
            raise SdliteError(f"init image must be {enc.inputs[in_name].shape} after preprocessing, got {image.shape}")
        t0 = time.perf_counter()
        moments = enc.run(**{in_name: image.astype(np.float32)})[out_name]
        elapsed = time.perf_counter() - t0
        mean, logvar = np.split(moments, 2, axis=1)
        std = np.exp(0.5 * np.clip(logvar, -30.0, 20.0))
        samples = mean + std * draw(sources, mean.shape)
        return (samples * np.float32(self.manifest.vae_scaling_factor)).astype(np.float32), elapsed

    def decode(self, latents: np.ndarray) -> tuple[list[np.ndarray], list[float], list[np.ndarray]]:
        """uint8 images of ``[N, C, h, w]`` latents, the per-image decode time and the float images in [0, 1]."""
        dec = self.interpreter.runner("vae_decoder")
        in_name = _pick(dec, "latents", rank=4)
        out_name = _pick(dec, "image", rank=4, outputs=True)
        images, times, units = [], [], []
        for i in range(latents.shape[0]):
            z = (latents[i : i + 1] / np.float32(self.manifest.vae_scaling_factor)).astype(np.float32)
            t0 = time.perf_counter()
            img = dec.run(**{in_name: z})[out_name]
            times.append(time.perf_counter() - t0)
            check_finite(img, f"image {i}: the output of {self._file('vae_decoder')}")
            units.append(to_unit(img))
            images.append(unit_to_uint8(units[-1]))  # (from the unit image: one clip and transpose, not two)
        return images, times, units

    def _check_unet_shape(self, latent_shape: tuple[int, ...]) -> None:
        unet, s_name, *_ = self._unet_io()
        if unet.inputs[s_name].shape[1:] != latent_shape[1:]:
            raise SdliteError(f"unet sample shape {unet.inputs[s_name].shape} does not match manifest latents "
                              f"{latent_shape[1:]} (stale manifest?)")

    def _done_with(self, name: str) -> None:
        """After a model's last use in this image: in low-memory mode, release it (release notes the GPU memory held
        up to then)."""
        if self.low_memory:
            self.interpreter.release(name)

    def calls_per_image_fill_batches(self, params: GenerationParams) -> bool:
        """Whether one image's UNet work items per step (2 with CFG, else 1) fill whole batches of the exported
        UNet: then generating images one at a time makes the same calls as generating them together."""
        if self.low_memory:  # the manifest's batch: loading the UNet now would put it on the device first
            batch = self.manifest.cfg_batch
        else:
            unet, s_name, *_ = self._unet_io()
            batch = unet.inputs[s_name].shape[0]
        return (2 if params.do_cfg else 1) % batch == 0

    # -- the loop -----------------------------------------------------------------------------------------
    def generate(
        self,
        params: GenerationParams | str,
        *,
        latents: np.ndarray | None = None,
        init_image: np.ndarray | None = None,
        noise: list[NoiseSource] | None = None,
        scheduler: Scheduler | None = None,
        progress: bool = True,
    ) -> GenerationResult:
        """Generate ``params.num_images`` images.

        ``latents``: explicit unit-variance initial noise ``[N, C, h, w]`` (txt2img; scaled by the scheduler's
        ``init_noise_sigma`` like diffusers). ``init_image``: ``[1, 3, H, W]`` in [-1, 1] for img2img.
        ``noise``: one stream per image (default: numpy streams seeded ``seed + k``).
        """
        if isinstance(params, str):
            params = GenerationParams(prompt=params)
        if self.delegate_options:
            from sdlite import native

            with native.extra_options(**self.delegate_options):
                return self._generate(params, latents, init_image, noise, scheduler, progress)
        return self._generate(params, latents, init_image, noise, scheduler, progress)

    def _generate(self, params: GenerationParams, latents: np.ndarray | None, init_image: np.ndarray | None,
                  noise: list[NoiseSource] | None, scheduler: Scheduler | None, progress: bool) -> GenerationResult:
        m = self.manifest
        params.validate(m.height, m.width)
        t_start = time.perf_counter()
        n = params.num_images
        latent_shape = (1, m.latent_channels, m.latent_height, m.latent_width)
        sources = noise if noise is not None else per_image_noise(params.seed, n)
        if len(sources) != n:
            raise SdliteError(f"need {n} noise streams (one per image), got {len(sources)}")
        timings = Timings()

        if not self.low_memory:  # (low memory: checked when the UNet loads, after the text encoder is gone)
            # every model's one-time GPU set-up at once, before the first is needed (a no-op once they ran)
            names = ("unet", "text_encoder", "vae_decoder", *(("vae_encoder",) if init_image is not None else ()))
            self.interpreter.warm_up(names, loaded=warm_progress_bars)
            self._check_unet_shape(latent_shape)

        t0 = time.perf_counter()
        prompts = [params.negative_prompt, params.prompt] if params.do_cfg else [params.prompt]
        embeds = self.prompt_embeds(prompts)
        timings.text_encoder_s = time.perf_counter() - t0
        uncond, cond = (embeds[0:1], embeds[1:2]) if params.do_cfg else (None, embeds[0:1])
        self._done_with("text_encoder")

        sched = scheduler or make_scheduler(params.scheduler, self.scheduler_config)
        sched.set_timesteps(params.steps)
        first = 0
        if init_image is not None:
            first = sched.img2img_start(params.steps, params.strength)
            if first >= len(sched.timesteps):
                raise SdliteError(
                    f"strength {params.strength} with {params.steps} steps leaves no denoising step; raise either"
                )
            init_latents, timings.vae_encode_s = self.encode_image(init_image, sources)
            check_finite(init_latents, f"the init image's latents from {self._file('vae_encoder')}")
            self._done_with("vae_encoder")
            x = sched.add_noise(init_latents, draw(sources, latent_shape), first)
        else:
            if latents is None:
                latents = draw(sources, latent_shape)
            elif tuple(latents.shape) != (n, *latent_shape[1:]):
                raise SdliteError(f"latents must have shape {(n, *latent_shape[1:])}, got {latents.shape}")
            x = (np.asarray(latents, dtype=np.float32) * sched.init_noise_sigma).astype(np.float32)

        if self.low_memory:
            self._check_unet_shape(latent_shape)
        steps = range(first, len(sched.timesteps))
        unet_file = self._file("unet")
        from tqdm.auto import tqdm  # (imported beside the warm-ups: warm_progress_bars)

        for i in tqdm(steps, desc="denoising", unit="step", disable=not progress, leave=False):
            t = float(sched.timesteps[i])
            step = f"step {i - first + 1}/{len(steps)}"
            ts = time.perf_counter()
            x_in = sched.scale_model_input(x, i)
            sched_s = time.perf_counter() - ts
            tu = time.perf_counter()
            pred, calls = self.predict_noise(x_in, t, uncond, cond, params.guidance_scale)
            timings.unet_step_s.append(time.perf_counter() - tu)
            timings.unet_calls += calls
            check_finite(pred, f"{step}: the noise prediction of {unet_file} (guidance {params.guidance_scale:g})")
            ts = time.perf_counter()
            step_noise = draw(sources, latent_shape) if sched.stochastic else None
            x = sched.step(pred.astype(np.float32), i, x, step_noise)
            timings.scheduler_s += sched_s + time.perf_counter() - ts
            check_finite(x, f"{step}: the latents after the {params.scheduler} scheduler step")

        self._done_with("unet")
        images, timings.vae_decode_s, units = self.decode(x)
        self._done_with("vae_decoder")
        self.interpreter.note_gpu_peak()  # every loaded model has run: its weights are on the device
        timings.total_s = time.perf_counter() - t_start
        seeds = [params.seed + k for k in range(n)]
        return GenerationResult(images, x, params, timings, self.interpreter.placement(), seeds, units)

    # -- diffusers' call ----------------------------------------------------------------------------------
    @overload
    def __call__(self, prompt: GenerationParams, **kwargs: Any) -> GenerationResult: ...

    @overload
    def __call__(self, prompt: str, negative_prompt: str | None = None, num_inference_steps: int = 50,
                 guidance_scale: float = 7.5, height: int | None = None, width: int | None = None,
                 num_images_per_prompt: int = 1, generator: GeneratorLike | None = None, image: Any = None,
                 strength: float = 0.8, latents: np.ndarray | None = None, output_type: str = "pil",
                 return_dict: bool = True, progress: bool | None = None) -> StableDiffusionPipelineOutput: ...

    def __call__(self, prompt: str | GenerationParams, negative_prompt: str | None = None,
                 num_inference_steps: int = 50, guidance_scale: float = 7.5, height: int | None = None,
                 width: int | None = None, num_images_per_prompt: int = 1, generator: GeneratorLike | None = None,
                 image: Any = None, strength: float = 0.8, latents: np.ndarray | None = None,
                 output_type: str = "pil", return_dict: bool = True, progress: bool | None = None,
                 **kwargs: Any) -> Any:
        """Generate ``num_images_per_prompt`` images of ``prompt``, with diffusers' keywords and defaults.

        ``generator``: a seed (image ``k`` uses seed + k: the pixels ``sdlite generate --seed`` writes), a numpy
        ``Generator`` (shared by the images, drawn in order), anything with ``randn(shape)``, or a list with one per
        image; None draws a random seed (reported in ``.seeds``). ``image`` + ``strength``: image-to-image from a
        PIL image, a path or an array (:func:`sdlite.images.prepare_image`). ``height``/``width`` must equal the
        exported size. ``latents``: explicit unit-variance initial noise ``[N, 4, h, w]`` (text-to-image).
        ``output_type``: ``"pil"`` or ``"np"``; ``return_dict=False`` returns ``(images, None)`` like diffusers.
        The sampler is ``self.scheduler``; ``progress`` (default: :meth:`set_progress_bar_config`'s) shows the bar. A :class:`GenerationParams` as ``prompt`` runs :meth:`generate`
        (sdlite's older form of this call).
        """
        if progress is None:
            progress = self.progress_bar
        if isinstance(prompt, GenerationParams):
            return self.generate(prompt, latents=latents, progress=progress, **kwargs)
        if kwargs:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(kwargs))}")
        if not isinstance(prompt, str):
            raise SdliteError(f"prompt must be one string (one prompt per call), got {type(prompt).__name__}")
        if output_type not in OUTPUT_TYPES:
            raise SdliteError(f"output_type must be one of {', '.join(OUTPUT_TYPES)}, got {output_type!r}")
        if not isinstance(self.scheduler, Scheduler):
            raise SdliteError(f"pipe.scheduler must be an sdlite scheduler (e.g. DDIMScheduler.from_config("
                              f"pipe.scheduler.config)), got {type(self.scheduler).__name__}")
        if num_images_per_prompt < 1:
            raise SdliteError(f"num_images_per_prompt must be >= 1, got {num_images_per_prompt}")
        sources, seeds = noise_sources(generator, num_images_per_prompt)
        params = GenerationParams(
            prompt=prompt, negative_prompt=negative_prompt or "", steps=num_inference_steps,
            guidance_scale=guidance_scale, seed=seeds[0] if seeds[0] is not None else 0, height=height, width=width,
            num_images=num_images_per_prompt, scheduler=scheduler_name(self.scheduler), strength=strength,
        )
        params.validate(self.manifest.height, self.manifest.width)
        init = None
        if image is not None:
            from sdlite.images import prepare_image

            init = prepare_image(image, self.manifest.width, self.manifest.height)
        result = self.generate(params, latents=latents, init_image=init, noise=sources, scheduler=self.scheduler,
                               progress=progress)
        if output_type == "np":
            images: Any = np.stack(result.unit_images)
        else:
            from PIL import Image

            images = [Image.fromarray(img, mode="RGB") for img in result.images]
        if not return_dict:
            return images, None
        return StableDiffusionPipelineOutput(images=images, seeds=seeds, timings=result.timings,
                                             placement=result.placement)
