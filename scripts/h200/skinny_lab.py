"""Skinny Winograd GEMM candidates (skinny_lab.cl) next to the library's gemm_t16x64, one process (pyopencl).

The Winograd GEMM of SD's 16x16 (F4) and 8x8 (F2) maps is a*a GEMMs of [T x Ci] x [Ci x Co] with T = 16 tiles per
image (32 at cfg batch 2), meant to be bound by streaming U (a*a/9 x the filter bytes). On the same random data
and queue (OpenCL event profile, median of --runs after 3 warm-ups) this times:
  * `lib gemm_t16x64`: the library kernel (the delegate's own source, tile-major U, no split);
  * `read (U bytes)`: a grid-strided float4 read of U (the bandwidth ceiling);
  * `sv ...`: gemm_sv configurations (skinny_lab.cl documents the -D options), split-K partials summed by
    splitk_sum4 (its time included).
Experiments (one per flag, else the full configuration sweep):
  --layout   U tile-major (BL0) vs k-blocks interleaved across work-groups (BL1), plus reads with those patterns;
  --rsplit   rows shared by RSPLIT work-items, and the kernel without its B loads (NOLOAD) / FMAs (NOMATH);
  --waves    the 16x16 F4 1280 -> 1280 GEMM at 6 .. 72 batch GEMMs (36 is the real one): does the time grow in
             steps of whole waves of work-groups (lib, and gemm_sv with / without loads or FMAs)?
  --v4       the library's float4-column skinny kernel (gemm_s16x<CW>, gemm_tiled.kern) at other CW / KL / KC / PF / RS
             instantiations (RS: work-items sharing a column's rows; SD_GEMM_SKINNY4 lines appended to the library
             source) and split-K 2 (the library's gemm_splitk_reduce, its time included), next to gemm_t16x64.
  --async    gemm_a16x<CW> (NVIDIA only: B rows streamed by cp.async into a per-work-item ring of PD x NG local
             slots, skinny_ring.cl SD_GEMM_SKINNY4A, built with -DSDGPU_NV_PTX=1 as the delegate does there) at
             several ring depths and split-K counts, next to the library's gemm_s16x128 and gemm_t16x64.
Every result is checked against numpy (float64) before it is timed (NOLOAD / NOMATH are not: they compute
nothing meaningful). Prints one line per (shape, config), a best-vs-lib summary, and writes --out (JSON).

    python3 scripts/h200/skinny_lab.py --out $OUT/skinny.json       # H200 (after `source .h200/setup.sh`)
    python3 scripts/h200/skinny_lab.py --quick --rsplit             # small shapes (PoCL here)
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cl_lab import GEMM_SOURCES_END, Lab, lib_source, rel_err  # noqa: E402

# (name, batch = a*a, M = tiles, N = Co, K = Ci)
SHAPES = [
    ("b1 16x16 F4 1280>1280", 36, 16, 1280, 1280),
    ("b1 16x16 F4 2560>1280", 36, 16, 1280, 2560),
    ("b1 16x16 F4 640>1280", 36, 16, 1280, 640),
    ("b1 8x8 F2 1280>1280", 16, 16, 1280, 1280),
    ("b1 8x8 F2 2560>1280", 16, 16, 1280, 2560),
    ("b2 16x16 F4 1280>1280", 36, 32, 1280, 1280),
    ("b2 8x8 F2 1280>1280", 16, 32, 1280, 1280),
]
WAVE_SHAPES = [(f"waves batch {b}", b, 16, 1280, 1280) for b in (6, 12, 18, 24, 30, 36, 42, 48, 60, 72)]
QUICK_SHAPES = [("quick F4", 36, 16, 128, 96), ("quick F2 m13", 16, 13, 192, 64), ("quick m32", 4, 32, 64, 128)]
LAB_CL = Path(__file__).resolve().parent / "skinny_lab.cl"
RING_CL = Path(__file__).resolve().parent / "skinny_ring.cl"  # --async
MAX_SPLITS = 8


def sweep_configs(quick: bool) -> list[dict]:
    """The full sweep: column width, columns per work-item, k-lanes, k per step, A in local memory, prefetch."""
    if quick:
        return [dict(CW=64, CPT=4, KL=8, KPT=4, AL=0, PF=1, S=1), dict(CW=32, CPT=8, KL=4, KPT=8, AL=1, PF=0, S=2),
                dict(CW=64, CPT=4, KL=16, KPT=4, AL=0, PF=0, S=1)]
    out = []
    for cw, cpt, kl, kpt, al in itertools.product((64, 32), (4, 8), (4, 8, 16), (4, 8), (0, 1)):
        if 64 <= cw // cpt * kl <= 256:
            out.append(dict(CW=cw, CPT=cpt, KL=kl, KPT=kpt, AL=al, PF=1, S=1))
    for base in (dict(CW=64, CPT=4, KL=8, KPT=4, AL=0), dict(CW=32, CPT=4, KL=8, KPT=4, AL=0),
                 dict(CW=64, CPT=4, KL=16, KPT=4, AL=0)):  # no prefetch, and split-K, around the expected optimum
        out += [dict(base, PF=0, S=1), dict(base, PF=1, S=2)]
    return out


def tm32_configs(quick: bool) -> list[dict]:
    """--tm32: 32-row tiles (TM = 32: one work-group reads U once for 32 rows, RS = 2 work-items per column, 16 rows
    each), next to the library's 16-row instantiation, for M = 32 (cfg batch 2)."""
    out = [dict(CW=128, KL=4, KC=128, PF=4, RS=1, S=1)]
    for cw, kl in ((64, 4), (128, 2), (64, 2), (32, 8)):
        out += [dict(CW=cw, KL=kl, KC=128, PF=4, RS=2, TM=32, S=s) for s in ((1,) if quick else (1, 2))]
    return out


def split_configs(splits: list[int]) -> list[dict]:
    """--splits: the library instantiation and the best 8x8-map one of session 10 at each split-K count."""
    if any(not 1 <= x <= MAX_SPLITS for x in splits):
        raise SystemExit(f"--splits: each count must be 1..{MAX_SPLITS}")
    bases = [dict(CW=128, KL=4, KC=128, PF=4, RS=1), dict(CW=64, KL=8, KC=128, PF=4, RS=1)]
    return [dict(b, S=x) for b in bases for x in splits]


def parse_v4_configs(text: str) -> list[dict]:
    """--configs: "CW:KL:KC:PF:RS:TM:S,..." gemm_s16x<CW> instantiations (TM 16 or 32; S split-K slices)."""
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        try:
            cw, kl, kc, pf, rs, tm, s = (int(v) for v in item.split(":"))
        except ValueError:
            raise SystemExit(f"--configs: {item!r} is not CW:KL:KC:PF:RS:TM:S (seven integers)") from None
        if (cw % 4 or (cw // 4 * kl * rs) % 16 or kc % kl or (kc // kl) % pf or tm % (4 * rs) or tm // rs > 16
                or not 1 <= s <= MAX_SPLITS):
            raise SystemExit(f"--configs: {item!r}: need CW % 4 == 0, CW/4*KL*RS % 16 == 0, KC % KL == 0, "
                             f"(KC/KL) % PF == 0, TM % (4*RS) == 0, TM/RS <= 16 and 1 <= S <= {MAX_SPLITS}")
        if max(kc * tm, kl * tm * cw) * 4 > 48 * 1024:
            raise SystemExit(f"--configs: {item!r} needs more than 48 KB of local memory")
        out.append(dict(CW=cw, KL=kl, KC=kc, PF=pf, RS=rs, TM=tm, S=s))
    return out


def v4_configs(quick: bool) -> list[dict]:
    """gemm_s16x<CW> instantiations: columns per work-group, k-lanes, k per staged A chunk, B rows in flight,
    work-items sharing a column's 16 rows (RS)."""
    if quick:
        return [dict(CW=128, KL=4, KC=128, PF=4, RS=1, S=1), dict(CW=64, KL=4, KC=128, PF=2, RS=2, S=2)]
    out = [dict(CW=128, KL=4, KC=128, PF=4, RS=1, S=s) for s in (1, 2)]
    for cw, kl, pf, s in itertools.product((64, 128), (2, 4, 8), (4, 8), (1, 2)):
        if 64 <= cw // 4 * kl * 2 <= 256 and cw * kl <= 768:
            out.append(dict(CW=cw, KL=kl, KC=128, PF=pf, RS=2, S=s))
    return out


def async_configs(quick: bool, rings: str = "", nomath: bool = False) -> list[dict]:
    """--async: gemm_a16x<CW> ring shapes (PD rows per cp.async group, NG groups, NG - 1 in flight) on the library's
    tile-major U (LY 0) and on a work-group-major U (LY 1: one step of a work-group reads KL x CW contiguous floats),
    at split-K 1 and 2, after the library's gemm_s16x128 (the first configs) for the side-by-side. `rings`
    ("PD:NG:LY,...") replaces the default list; `nomath` adds the (4, 4) rings without their FMAs (loads alone).
    Every ring keeps the kernel's local memory (A chunk + ring) within 40 KB of NVIDIA's 48 KB: one config over it
    would fail the whole program. Twelve instantiations (LY and NOMATH variants) did not finish building within
    ~190 s on an H100 (session 16, call 3): keep the list short on a short device call."""
    out = [dict(CW=128, KL=4, KC=128, PF=4, RS=1, S=s) for s in (1, 2)]
    ring = dict(CW=128, KL=4, KC=128, NOMATH=0)
    chosen = ([tuple(int(v) for v in r.split(":")) for r in rings.split(",") if r] if rings
              else [(4, 4, 0), (4, 4, 1)] if quick else [(4, 4, 0), (4, 4, 1), (4, 3, 1), (8, 2, 1), (2, 8, 1)])
    for (pd, ng, ly), s in itertools.product(chosen, (1, 2)):
        out.append(dict(ring, PD=pd, NG=ng, LY=ly, S=s))
    if nomath:
        out += [dict(ring, PD=4, NG=4, LY=ly, NOMATH=1, S=1) for ly in (0, 1)]
    return out


def v4_launcher(lab: Lab, prog, cfg: dict, s: Shape, gemm_only: bool = False) -> Callable[[], list]:
    """The library's gemm_s16x<CW> instantiation `cfg` on `s` (tile-major U), plus gemm_splitk_reduce when it
    splits (not with `gemm_only`: the partials are then left unsummed); arguments bound once."""
    i32 = np.int32
    splits, nthreads, tm = cfg["S"], cfg["CW"] // 4 * cfg["KL"] * cfg.get("RS", 1), cfg.get("TM", 16)
    ksplit = s.k if splits == 1 else -(-s.k // splits // 16) * 16
    grid = (-(-s.n // cfg["CW"]) * 16, -(-s.m // tm) * (nthreads // 16), s.batch * splits)
    if cfg.get("LY"):  # work-group-major U: split points on whole KC chunks
        ksplit = -(-s.k // splits // cfg["KC"]) * cfg["KC"]
    kern = lab.cl.Kernel(prog, v4_name(cfg))
    bind_lib_gemm(kern, s, splits, ksplit)
    if cfg.get("LY"):
        buf, sbb = s.wg_major(cfg["CW"], cfg["KL"], cfg["KC"])
        kern.set_arg(10, buf)
        kern.set_arg(12, np.int32(sbb))
    if splits == 1 or gemm_only:
        return lambda: [lab.launch(kern, grid, (16, nthreads // 16, 1))]
    red = lab.cl.Kernel(prog, "gemm_splitk_reduce")
    red.set_args(s.c_d, i32(0), i32(s.m * s.n), i32(s.n), s.p_d, i32(0), i32(splits), s.c_d, i32(0), i32(0),
                 i32(s.m), i32(s.n), i32(0), s.c_d, i32(0), i32(0), i32(0))
    red_grid = (-(-s.n // 16) * 16, -(-s.m // 16) * 16, s.batch)
    return lambda: [lab.launch(kern, grid, (16, nthreads // 16, 1)), lab.launch(red, red_grid, (16, 16, 1))]


def v4_name(cfg: dict) -> str:
    if "NG" in cfg:
        return "ga_{CW}_{KL}_{KC}_{PD}_{NG}_{LY}_{NOMATH}".format(**cfg)
    return "gv_{CW}_{KL}_{KC}_{PF}_{RS}_".format(**cfg) + str(cfg.get("TM", 16))


def v4_source(cfgs: list[dict]) -> str:
    """The library source plus one SD_GEMM_SKINNY4 line per config; ring configs (NG) append skinny_ring.cl and an
    SD_GEMM_SKINNY4A line inside its SDGPU_NV_PTX block, so they build only with -DSDGPU_NV_PTX=1."""
    plain = {f"SD_GEMM_SKINNY4({v4_name(c)}, {c['CW']}, {c['KL']}, {c['KC']}, {c['PF']}, {c['RS']}, {c.get('TM', 16)})"
             for c in cfgs if "NG" not in c}
    ring = {f"SD_GEMM_SKINNY4A({v4_name(c)}, {c['CW']}, {c['KL']}, {c['KC']}, {c['PD']}, {c['NG']}, {c['LY']}, "
            f"{c['NOMATH']})" for c in cfgs if "NG" in c}
    src = lib_source(GEMM_SOURCES_END) + "\n" + "\n".join(sorted(plain)) + "\n"
    if ring:
        anchor = "#endif  // SDGPU_NV_PTX"
        src += RING_CL.read_text().replace(anchor, "\n".join(sorted(ring)) + "\n" + anchor, 1)
    return src


def layout_configs(quick: bool) -> list[dict]:
    bases = [dict(CW=64, CPT=4, KL=4, KPT=4, AL=1, PF=1), dict(CW=64, CPT=4, KL=8, KPT=4, AL=1, PF=1),
             dict(CW=64, CPT=4, KL=16, KPT=4, AL=1, PF=1), dict(CW=64, CPT=4, KL=8, KPT=4, AL=0, PF=0),
             dict(CW=64, CPT=4, KL=16, KPT=4, AL=0, PF=0), dict(CW=64, CPT=4, KL=16, KPT=8, AL=1, PF=1)]
    return [dict(b, BL=bl, S=1) for b in bases[: 2 if quick else None] for bl in (0, 1)]


def rsplit_configs(quick: bool) -> list[dict]:
    base = dict(CW=64, CPT=4, KL=8, KPT=4, AL=1, PF=1, S=1)
    out = [dict(base, NOLOAD=1), dict(base, NOMATH=1), dict(base)]
    for rs, kl, kpt, al, pf in itertools.product((2, 4), (2, 4, 8), (4, 8), (0, 1), (0, 1)):
        if 16 * rs * kl <= 256 and not (kpt == 8 and pf == 1 and rs == 2):
            out.append(dict(CW=64, CPT=4, KL=kl, KPT=kpt, AL=al, PF=pf, S=1, RSPLIT=rs))
    return out[:6] if quick else out


class Shape:
    """Random A, B (tile-major like the library's U, and k-block interleaved on demand), the float64 reference."""

    def __init__(self, lab: Lab, rng: np.random.Generator, name: str, batch: int, m: int, n: int, k: int) -> None:
        self.lab, self.name, self.batch, self.m, self.n, self.k = lab, name, batch, m, n, k
        a = rng.standard_normal((batch, m, k)).astype(np.float32)
        b = (rng.standard_normal((batch, k, n)) * 0.05).astype(np.float32)
        self.ref = np.einsum("bmk,bkn->bmn", a.astype(np.float64), b.astype(np.float64))
        self.col_tiles = (n + 63) // 64
        self.nslab = batch * self.col_tiles
        bpad = np.zeros((batch, k, self.col_tiles * 64), np.float32)
        bpad[:, :, :n] = b
        self.bt = np.ascontiguousarray(bpad.reshape(batch, k, self.col_tiles, 64).transpose(0, 2, 1, 3))
        self.sbb = self.col_tiles * k * 64
        self.a_d, self.b_d = lab.buffer(a), lab.buffer(self.bt)
        self.c_d = lab.buffer(nbytes=batch * m * n * 4)
        self.p_d = lab.buffer(nbytes=MAX_SPLITS * batch * m * n * 4)  # split-K partials
        self.out_d = lab.buffer(nbytes=max(lab.dev.max_compute_units * 2048, self.nslab * 256) * 4)
        self._inter: dict[int, object] = {}
        self._b, self._wg = b, {}

    def interleaved(self, kbr: int):
        """B as [ceil(K/kbr)][batch*col_tiles][kbr][64] (zero rows past K)."""
        if kbr not in self._inter:
            kp = -(-self.k // kbr) * kbr
            x = np.zeros((self.batch, self.col_tiles, kp, 64), np.float32)
            x[:, :, : self.k] = self.bt
            self._inter[kbr] = self.lab.buffer(
                np.ascontiguousarray(x.reshape(self.nslab, kp // kbr, kbr, 64).transpose(1, 0, 2, 3)))
        return self._inter[kbr]

    def wg_major(self, cw: int, kl: int, kc: int) -> tuple[object, int]:
        """B as [batch][N/cw][Kp][cw] (skinny_ring.cl LY 1), each kc chunk's rows ordered (j, lane) for lane-major k
        (k = chunk * kc + lane * kc / kl + j), zero past K and N; and its batch stride."""
        key = (cw, kl, kc)
        if key not in self._wg:
            kp, np_ = -(-self.k // kc) * kc, -(-self.n // cw) * cw
            x = np.zeros((self.batch, kp, np_), np.float32)
            x[:, : self.k, : self.n] = self._b
            x = x.reshape(self.batch, kp // kc, kl, kc // kl, np_ // cw, cw).transpose(0, 4, 1, 3, 2, 5)
            self._wg[key] = (self.lab.buffer(np.ascontiguousarray(x)), kp * np_)
        return self._wg[key]

    def check(self, label: str) -> float:
        err = rel_err(self.lab.read(self.c_d, (self.batch, self.m, self.n)), self.ref)
        if not err < 1e-5:
            raise SystemExit(f"{self.name} {label}: wrong result, max rel err {err:.2e}")
        return err

    def release(self) -> None:
        for buf in (self.a_d, self.b_d, self.c_d, self.p_d, self.out_d, *self._inter.values(),
                    *(b for b, _ in self._wg.values())):
            buf.release()


def bind_lib_gemm(kern, s: Shape, splits: int, ksplit: int) -> None:
    """Binds the library GEMM parameters (gemm_tiled.kern) for `s`: A row-major, U tile-major (b_half = 2), no bias,
    no residual; C when unsplit, else the split-K partials [batch][split][m][n] in s.p_d."""
    i32 = np.int32
    dst, scb, scs = (s.c_d, s.m * s.n, 0) if splits == 1 else (s.p_d, splits * s.m * s.n, s.m * s.n)
    kern.set_args(dst, i32(0), i32(scb), i32(scs), i32(s.n), s.a_d, i32(0), i32(s.m * s.k), i32(s.k), i32(1),
                  s.b_d, i32(0), i32(s.sbb), i32(s.n), i32(1), i32(2), s.c_d, i32(0), i32(0), i32(s.m), i32(s.n),
                  i32(s.k), np.float32(1), i32(0), i32(splits), i32(ksplit), s.c_d, i32(0), i32(0), i32(0))


def lib_launcher(lab: Lab, s: Shape) -> Callable[[], list]:
    """The library's gemm_t16x64 on `s` (tile-major U, no split), arguments bound once."""
    kern = lab.cl.Kernel(lab.program(lib_source(GEMM_SOURCES_END)), "gemm_t16x64")
    bind_lib_gemm(kern, s, 1, s.k)
    grid = (s.col_tiles * 16, (s.m + 15) // 16 * 16, s.batch)
    return lambda: [lab.launch(kern, grid, (16, 16, 1))]


def sv_launcher(lab: Lab, prog, cfg: dict, s: Shape) -> Callable[[], list]:
    """gemm_sv of configuration `cfg` on `s` (plus the split-K sum when it splits), arguments bound once."""
    i32 = np.int32
    splits, nthreads = cfg["S"], cfg["CW"] // cfg["CPT"] * cfg["KL"] * cfg.get("RSPLIT", 1)
    ksplit = s.k if splits == 1 else -(-s.k // splits // cfg["KPT"]) * cfg["KPT"]
    grid = (-(-s.n // cfg["CW"]) * nthreads, -(-s.m // cfg["RM"]), s.batch * splits)
    bsrc, bstride = (s.interleaved(cfg["KL"] * cfg["KPT"]), s.nslab) if cfg.get("BL") else (s.b_d, s.sbb)
    kern = lab.cl.Kernel(prog, "gemm_sv")
    tail = (s.a_d, i32(s.m * s.k), i32(s.k), bsrc, i32(bstride), i32(s.m), i32(s.n), i32(s.k), i32(splits), i32(ksplit))
    if splits == 1:
        kern.set_args(s.c_d, i32(s.m * s.n), i32(0), i32(s.n), *tail)
        return lambda: [lab.launch(kern, grid, (nthreads, 1, 1))]
    # partials [split][batch][m][n] (z = bz*splits + sz: scb = m*n, scs = batch*m*n), then summed
    total = s.batch * s.m * s.n
    kern.set_args(s.p_d, i32(s.m * s.n), i32(total), i32(s.n), *tail)
    red = lab.cl.Kernel(prog, "splitk_sum4")
    red.set_args(s.c_d, s.p_d, i32(total), i32(splits), i32(total // 4))
    red_grid = (-(-total // 4 // 256) * 256,)
    return lambda: [lab.launch(kern, grid, (nthreads, 1, 1)), lab.launch(red, red_grid, (256,))]


def run_shape(lab: Lab, s: Shape, cfgs: list[dict], args: argparse.Namespace, t_end: float, rows: list) -> None:
    i32 = np.int32
    ubytes = s.bt.nbytes
    lab_src = LAB_CL.read_text()

    def report(label: str, ms: float, err: float) -> None:
        rows.append(dict(shape=s.name, config=label, ms=ms, tbps=ubytes / ms * 1e-9, err=err))
        print(f"{s.name:24s} {label:46s} {ms:8.4f} ms {ubytes / ms * 1e-9:6.2f} TB/s  err {err:.1e}", flush=True)

    launch_lib = lib_launcher(lab, s)
    launch_lib()
    lab.queue.finish()
    report("lib gemm_t16x64", lab.timed(launch_lib, args.runs), s.check("lib"))

    refs = lab.program(lab_src)
    nthr = lab.dev.max_compute_units * 2048
    read = lab.cl.Kernel(refs, "read_sum4")
    read.set_args(s.out_d, s.b_d, i32(ubytes // 16))
    report("read (U bytes)", lab.timed(lambda: [lab.launch(read, (nthr,), (256,))], args.runs), 0.0)
    if args.layout:  # the access patterns alone, no math
        per = s.k * 64 // 4
        for label, name, extra in (("read per-wg slabs", "read_slabs", ()),
                                   ("read interleaved 16 KB", "read_inter", (i32(1024),)),
                                   ("read interleaved 4 KB", "read_inter", (i32(256),))):
            if extra and per % int(extra[0]):
                continue
            kern = lab.cl.Kernel(refs, name)
            kern.set_args(s.out_d, s.b_d, i32(per), *extra)
            report(label, lab.timed(lambda kern=kern: [lab.launch(kern, (s.nslab * 256,), (256,))], args.runs), 0.0)

    if args.v4 or args.tm32 or args.ring:
        t_build = time.time()
        prog = lab.program(v4_source(cfgs))  # on NVIDIA (the only place --async runs) with -DSDGPU_NV_PTX=1
        print(f"{s.name:24s} build {time.time() - t_build:.1f} s", flush=True)
        for cfg in cfgs:
            if time.time() > t_end:
                break
            label = ("ring " if "NG" in cfg else "v4 ") + " ".join(
                f"{key}{val}" for key, val in cfg.items() if key != "RM" and not (key == "NOMATH" and not val))
            lab.cl.enqueue_fill_buffer(lab.queue, s.c_d, np.float32(np.nan), 0, s.batch * s.m * s.n * 4)
            launch = v4_launcher(lab, prog, cfg, s)
            launch()
            lab.queue.finish()
            report(label, lab.timed(launch, args.runs), float("nan") if cfg.get("NOMATH") else s.check(label))
            if cfg["S"] > 1:  # the GEMM alone: what a reduce folded into the next kernel would leave
                report(label + " gemm-only", lab.timed(v4_launcher(lab, prog, cfg, s, True), args.runs),
                       float("nan"))
        return
    for cfg in cfgs:
        if time.time() > t_end:
            break
        label = "sv " + " ".join(f"{key}{val}" for key, val in cfg.items())
        try:
            prog = lab.program(lab_src, " ".join(f"-D{key}={val}" for key, val in cfg.items() if key != "S"))
        except lab.cl.RuntimeError as e:  # e.g. local memory over the limit
            print(f"{s.name:24s} {label:46s} build failed: {str(e).splitlines()[0]}", flush=True)
            continue
        lab.cl.enqueue_fill_buffer(lab.queue, s.c_d, np.float32(np.nan), 0, s.batch * s.m * s.n * 4)
        launch = sv_launcher(lab, prog, cfg, s)
        launch()
        lab.queue.finish()
        partial = cfg.get("NOLOAD") or cfg.get("NOMATH")
        report(label, lab.timed(launch, args.runs), float("nan") if partial else s.check(label))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shapes", default="", help="comma-separated substrings of shape names")
    ap.add_argument("--deadline-s", type=float, default=240.0)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--layout", action="store_true", help="the B-layout experiment instead of the full sweep")
    mode.add_argument("--rsplit", action="store_true", help="the row-split / no-load / no-math experiment")
    mode.add_argument("--waves", action="store_true", help="one shape at growing batch counts")
    mode.add_argument("--v4", action="store_true", help="the library's gemm_s16x<CW> at other instantiations")
    mode.add_argument("--tm32", action="store_true", help="gemm_s16x<CW>'s 32-row tile instantiations (TM = 32)")
    mode.add_argument("--async", dest="ring", action="store_true",
                      help="gemm_a16x<CW> (cp.async ring, NVIDIA only) next to gemm_s16x128")
    ap.add_argument("--rings", default="", help="with --async: PD:NG:LY,... instead of the default ring list")
    ap.add_argument("--nomath", action="store_true", help="with --async: also the (4, 4) rings without FMAs")
    ap.add_argument("--configs", default="", help="with --v4: CW:KL:KC:PF:RS:TM:S,... instead of the sweep (e.g. "
                    "128:1:320:4:1:16:4, one A chunk per work-group and no k-lanes)")
    ap.add_argument("--splits", default="", help="with --v4: split-K counts (e.g. 1,2,4,8) for two base "
                    "instantiations instead of the sweep; splits > 1 also timed without their reduce")
    args = ap.parse_args()
    t_end = time.time() + args.deadline_s
    lab = Lab()
    print(f"device: {lab.describe()}", flush=True)
    if args.ring and "NVIDIA" not in lab.dev.platform.name:
        print("skinny_lab --async: needs NVIDIA's OpenCL (inline PTX cp.async); nothing measured", flush=True)
        return 2
    shapes = QUICK_SHAPES if args.quick else WAVE_SHAPES if args.waves else SHAPES
    if args.shapes:
        shapes = [sh for sh in shapes if any(key in sh[0] for key in args.shapes.split(","))]
    configs = (layout_configs if args.layout else rsplit_configs if args.rsplit else v4_configs if args.v4
               else tm32_configs if args.tm32 else sweep_configs)(args.quick)
    if args.ring:
        configs = async_configs(args.quick, args.rings, args.nomath)
    if args.splits:
        if not args.v4:
            raise SystemExit("--splits goes with --v4")
        configs = split_configs([int(x) for x in args.splits.split(",") if x.strip()])
    if args.configs:
        if not args.v4:
            raise SystemExit("--configs goes with --v4")
        configs = parse_v4_configs(args.configs)
    if args.waves:
        configs = rsplit_configs(True)[:3]  # the same gemm_sv without loads, without FMAs, and whole
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    for shape in shapes:
        if time.time() > t_end:
            print("deadline reached", flush=True)
            break
        s = Shape(lab, rng, *shape)
        cfgs = [dict(c, RM=16) for c in configs]
        if s.m > 16 and not args.layout and not args.v4 and not args.tm32 and not args.ring:  # one 32-row tile instead of two 16-row tiles (B streamed twice)
            cfgs += [dict(c, RM=32) for c in configs if not args.rsplit or c.get("RSPLIT", 1) > 1]
        run_shape(lab, s, cfgs, args, t_end, rows)
        s.release()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(device=lab.dev.name, rows=rows), indent=1))
    lib_ms = {r["shape"]: r["ms"] for r in rows if r["config"].startswith("lib")}
    s16 = {r["shape"]: r["ms"] for r in rows if r["config"] == "v4 CW128 KL4 KC128 PF4 RS1 S1"}
    best: dict[str, dict] = {}
    for r in rows:
        if not r["config"].startswith(("sv", "ring")) or "NO" in r["config"] or "gemm-only" in r["config"]:
            continue
        if r["shape"] not in best or r["ms"] < best[r["shape"]]["ms"]:
            best[r["shape"]] = r
    for name, r in best.items():
        vs_s16 = f", gemm_s16x128 {s16[name]:.4f} ({s16[name] / r['ms']:.2f}x)" if name in s16 else ""
        print(f"best {name:24s} {r['config']:46s} {r['ms']:.4f} ms vs lib {lib_ms[name]:.4f} "
              f"({lib_ms[name] / r['ms']:.2f}x){vs_s16}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
