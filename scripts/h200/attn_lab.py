"""Attention kernel build variants on one queue (pyopencl, cl_lab.py): the library's row-wise flash kernels at
SD1.5's long self-attention shapes, as the delegate builds them, with exp2 -> native_exp2, and with extra
row-wise instantiations appended (ATR_INSTANTIATE: suffix, D, RM, RW, NS, KS, DB, LZ, QL; ops/attention/gpu.kern
documents them). Device ms per launch (median of --runs) and TFLOP/s (4 * Sq * Sk * D * heads); every variant
is checked against a float64 numpy reference on the first 256 query rows before it is timed.

    python3 scripts/h200/attn_lab.py --out $OUT/attn.json    # H200
    python3 scripts/h200/attn_lab.py --quick                 # small shapes (PoCL here)

--splits 1,2,4: the key split instead (attn_flash_ks_<t> + attn_merge, as the delegate launches them; 1 = the
plain attn_flash_<t>) at every SD1.5 self/cross-attention shape the row-wise tilings run, b1 and b2; the time is
the two launches' device time summed.

--reqd: the row-wise kernels built with reqd_work_group_size(NT) against the library build (attention file only).

--small: the short-sequence shapes (cross-attention with 77 keys, the 16x16 / 8x8 levels), b1 and b2, through every
kernel family that can run them (the tiled d*/r* tilings, "dyn", and the one-row-per-work-group fallback
attn_flash), to check the op's per-shape pick.

--baseline FILE (with the default run, --small or --xs): every library kernel also built from FILE, the attention
program of another checkout, and timed on the same data in the same run ("base ..." rows): a kernel source change
against the code it replaced. FILE from that checkout's root:
    python3 -c "import sys; sys.path.insert(0, 'scripts/h200'); from cl_lab import attention_source; \
print(attention_source())" > FILE
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cl_lab import Lab, attention_source, lib_source, rel_err  # noqa: E402

# (name, S (= Sq = Sk), heads, head dim, the library's tiling, its BQ, its NT)
SHAPES = [("64x64 self 4096 d40", 4096, 8, 40, "r40", 128, 128), ("32x32 self 1024 d80", 1024, 8, 80, "r80", 64, 128)]
QUICK_SHAPES = [("quick d40", 256, 2, 40, "r40", 128, 128), ("quick d80", 128, 2, 80, "r80", 64, 128)]
EXTRA = {  # session 14: the head-dim split (DS = 2) at d40 with 4 and 3 rows per work-item (both slower than r40)
    "r40": ["h2, 40, 4, 32, 2, 4, 1, 0.0f, 0, 2", "h7, 40, 3, 32, 2, 8, 1, 0.0f, 0, 2"],
    "r80": ["g1, 80, 2, 32, 2, 4, 1, 8.0f, 0, 2"],
}


def extra_source(lines: Iterable[str]) -> str:
    """The library source with ATR_INSTANTIATE(line) appended for each of `lines` (EXTRA / XS_EXTRA entries; the
    macro stays defined to the end of the program)."""
    extra = "\n".join(f"ATR_INSTANTIATE({line})" for line in lines)
    return lib_source() + "\n" + extra + "\n"


def extra_geometry(line: str) -> tuple[str, int, int]:
    """(suffix, BQ = RW*RM, NT = RW*NS*DS) of an EXTRA line (suffix, D, RM, RW, NS, KS, DB, LZ, QL, DS)."""
    p = [x.strip() for x in line.split(",")]
    return p[0], int(p[3]) * int(p[2]), int(p[3]) * int(p[4]) * int(p[9])


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, d: int, rows: int) -> np.ndarray:
    out = np.empty((rows, heads * d))
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        s = q[:rows, cols].astype(np.float64) @ k[:, cols].T.astype(np.float64) / np.sqrt(d)
        p = np.exp(s - s.max(1, keepdims=True))
        out[:, cols] = (p / p.sum(1, keepdims=True)) @ v[:, cols]
    return out


# (name, batch, Sq, Sk, heads, head dim, tiling, BQ, NT, BK): the row-wise tilings' SD1.5 shapes
SPLIT_SHAPES = [
    ("b1 64x64 self 4096 d40", 1, 4096, 4096, 8, 40, "r40", 128, 128, 16),
    ("b1 32x32 self 1024 d80", 1, 1024, 1024, 8, 80, "r80", 64, 128, 16),
    ("b2 32x32 self 1024 d80", 2, 1024, 1024, 8, 80, "r80", 64, 128, 16),
    ("b1 32x32 self 1024 d80", 1, 1024, 1024, 8, 80, "h80", 64, 256, 16),
    ("b2 32x32 self 1024 d80", 2, 1024, 1024, 8, 80, "h80", 64, 256, 16),
    ("b1 16x16 self 256 d160", 1, 256, 256, 8, 160, "r160", 16, 128, 16),
    ("b2 16x16 self 256 d160", 2, 256, 256, 8, 160, "r160", 16, 128, 16),
    ("b1 16x16 cross 256x77 d160", 1, 256, 77, 8, 160, "r160", 16, 128, 16),
    ("b2 16x16 cross 256x77 d160", 2, 256, 77, 8, 160, "r160", 16, 128, 16),
    ("b1 8x8 self 64 d160", 1, 64, 64, 8, 160, "r160", 16, 128, 16),
    ("b1 8x8 cross 64x77 d160", 1, 64, 77, 8, 160, "r160", 16, 128, 16),
]
QUICK_SPLIT_SHAPES = [("quick d80", 1, 64, 300, 2, 80, "r80", 64, 128, 16),
                      ("quick d80 h80", 1, 64, 300, 2, 80, "h80", 64, 256, 16),
                      ("quick d160", 2, 20, 77, 2, 160, "r160", 16, 128, 16)]


def measure(lab: Lab, launch, out: tuple, ref: np.ndarray, runs: int, name: str, label: str, flops: float = 0.0,
            **extra) -> dict | None:
    """Run `launch` once, check the first rows of `out` = (buffer, shape) against `ref` (max rel err < 1e-4), then
    time it: the result row, or None (reported) for a wrong result."""
    launch()
    lab.queue.finish()
    err = rel_err(lab.read(*out)[:len(ref)], ref)
    if not err < 1e-4:
        print(f"{name:28s} {label:28s} wrong result, max rel err {err:.2e}", flush=True)
        return None
    ms = lab.timed(launch, runs)
    row = dict(shape=name, config=label, ms=ms, err=err, **extra)
    rate = ""
    if flops:
        row["tflops"] = flops / ms * 1e-9
        rate = f" {row['tflops']:6.1f} TFLOP/s"
    print(f"{name:28s} {label:28s} {ms:8.4f} ms{rate}  err {err:.1e}", flush=True)
    return row


def run_splits(lab: Lab, shapes: list, runs: int, splits_list: list[int]) -> list[dict]:
    prog = lab.program(lib_source())
    rng = np.random.default_rng(1)
    i32 = np.int32
    rows = []
    for name, n, sq, sk, heads, d, tiling, bq, nt, bk in shapes:
        q = rng.standard_normal((n * sq, heads * d)).astype(np.float32)
        k, v = (rng.standard_normal((n * sk, heads * d)).astype(np.float32) for _ in range(2))
        nref = min(sq, 256)
        ref = reference(q[:sq], k[:sk], v[:sk], heads, d, nref)  # batch 0
        qd, kd, vd = (lab.buffer(x) for x in (q, k, v))
        o_d = lab.buffer(nbytes=q.nbytes)
        groups = -(-sq // bq) * heads * n
        tiles = -(-sk // bk)
        scale = np.float32(1.0 / np.sqrt(d))
        for splits in splits_list:
            if splits > tiles:
                continue
            if splits == 1:
                kern = lab.cl.Kernel(prog, f"attn_flash_{tiling}")
                kern.set_args(o_d, i32(0), qd, i32(0), kd, i32(0), vd, i32(0), i32(sq), i32(sk), i32(heads), i32(d),
                              scale, i32(0))

                def launch(kern=kern):
                    return [lab.launch(kern, (groups * nt,), (nt,))]
            else:
                kps = -(-tiles // splits) * bk
                used = -(-sk // kps)
                pstride, sstride = n * sq * heads * d, 2 * n * heads * sq
                scratch = lab.buffer(nbytes=4 * used * (pstride + sstride))
                ks = lab.cl.Kernel(prog, f"attn_flash_ks_{tiling}")
                ks.set_args(scratch, i32(0), i32(pstride), scratch, i32(used * pstride), i32(sstride), qd, i32(0), kd,
                            i32(0), vd, i32(0), i32(sq), i32(sk), i32(heads), i32(d), scale, i32(0), i32(kps))
                mg = lab.cl.Kernel(prog, "attn_merge")
                total4 = pstride // 4
                mg.set_args(o_d, i32(0), scratch, i32(0), i32(pstride), scratch, i32(used * pstride), i32(sstride),
                            i32(used), i32(sq), i32(heads), i32(d), i32(total4))

                def launch(ks=ks, mg=mg, used=used, total4=total4):
                    return [lab.launch(ks, (groups * nt, used), (nt, 1)),
                            lab.launch(mg, (-(-total4 // 64) * 64,), (64,))]
            row = measure(lab, launch, (o_d, q.shape), ref, runs, name, f"{tiling} splits {splits} ({groups} wg)",
                          4.0 * n * sq * sk * d * heads, splits=splits, groups=groups)
            if row:
                rows.append(row)
    return rows


# (name, batch, Sq, Sk, heads, head dim, [(kernel, BQ, NT), ...]); BQ = 1, NT = 64: the fallback (ATT_WG).
# attn_short_q*: at most 80 keys (skipped above that).
SHORT_KERNELS = [("attn_short_q64", 64, 160), ("attn_short_q32", 32, 160), ("attn_short_q16", 16, 160)]
SMALL_KERNELS = {
    40: [("attn_flash_d40", 64, 128), ("attn_flash_r40", 128, 128), ("attn_flash_dyn", 32, 256), ("attn_flash", 1, 64),
         *SHORT_KERNELS],
    80: [("attn_flash_d80", 32, 128), ("attn_flash_r80", 64, 128), ("attn_flash_dyn", 32, 256), ("attn_flash", 1, 64),
         *SHORT_KERNELS],
    160: [("attn_flash_r160", 16, 128), ("attn_flash_h160", 16, 256), ("attn_flash_h160w", 32, 256),
          ("attn_flash_d160", 32, 128), ("attn_flash_dyn", 32, 256), ("attn_flash", 1, 64), *SHORT_KERNELS],
    64: [("attn_flash_dyn", 32, 256), ("attn_flash", 1, 64), *SHORT_KERNELS],  # the text encoder (CLIP ViT-L/14)
}
SMALL_SHAPES = [(f"b{n} {lvl} {kind} {sq}x{sk} d{d}", n, sq, sk, 8, d)
                for n in (1, 2)
                for lvl, kind, sq, sk, d in [("64x64", "cross", 4096, 77, 40), ("32x32", "cross", 1024, 77, 80),
                                             ("16x16", "self", 256, 256, 160), ("16x16", "cross", 256, 77, 160),
                                             ("8x8", "self", 64, 64, 160), ("8x8", "cross", 64, 77, 160)]] + [
    ("b1 text self 77x77 d64 (12 heads)", 1, 77, 77, 12, 64)]
QUICK_SMALL_SHAPES = [("quick cross d40", 1, 100, 77, 2, 40), ("quick self d160", 1, 40, 40, 2, 160)]


def run_small(lab: Lab, shapes: list, runs: int, baseline: str = "") -> list[dict]:
    progs = {"": lab.program(lib_source())}
    if baseline:
        progs["base "] = lab.program(baseline)
    rng = np.random.default_rng(1)
    i32 = np.int32
    rows = []
    for name, n, sq, sk, heads, d in shapes:
        q = rng.standard_normal((n * sq, heads * d)).astype(np.float32)
        k, v = (rng.standard_normal((n * sk, heads * d)).astype(np.float32) for _ in range(2))
        nref = min(sq, 256)
        ref = reference(q[:sq], k[:sk], v[:sk], heads, d, nref)
        qd, kd, vd = (lab.buffer(x) for x in (q, k, v))
        o_d = lab.buffer(nbytes=q.nbytes)
        for kname, bq, nt in SMALL_KERNELS[d]:
            if kname.startswith("attn_short") and sk > 80:
                continue
            for label, prog in progs.items():
                kern = lab.cl.Kernel(prog, kname)
                kern.set_args(o_d, i32(0), qd, i32(0), kd, i32(0), vd, i32(0), i32(sq), i32(sk), i32(heads), i32(d),
                              np.float32(1.0 / np.sqrt(d)), i32(0))
                grid = (-(-sq // bq) * heads * n * nt,)

                def launch(kern=kern, grid=grid, nt=nt):
                    return [lab.launch(kern, grid, (nt,))]

                row = measure(lab, launch, (o_d, q.shape), ref, runs, name, label + kname)
                if row:
                    rows.append(row)
    return rows


def time_flash(lab: Lab, rng: np.random.Generator, name: str, s: int, heads: int, d: int, variants: list,
               runs: int, report_build_errors: bool = False) -> list[dict]:
    """Flash attention at Sq = Sk = `s` (`heads` heads of `d`, batch 1) through every variant (label, source, build
    options, tiling suffix, BQ, NT): built, checked against float64 on the first rows, then timed. A build failure
    raises, or with `report_build_errors` is printed and the variant skipped."""
    i32 = np.int32
    q, k, v = (rng.standard_normal((s, heads * d)).astype(np.float32) for _ in range(3))
    ref = reference(q, k, v, heads, d, min(s, 256))
    bufs = [lab.buffer(x) for x in (q, k, v)]
    o_d = lab.buffer(nbytes=q.nbytes)
    rows = []
    for label, source, options, suffix, vbq, vnt in variants:
        try:
            kern = lab.cl.Kernel(lab.program(source, options), f"attn_flash_{suffix}")
        except Exception as e:  # noqa: BLE001 - with report_build_errors a build failure is a result
            if not report_build_errors:
                raise
            print(f"{name:20s} {label:40s} build failed: {str(e)[:300]}", flush=True)
            continue
        kern.set_args(o_d, i32(0), bufs[0], i32(0), bufs[1], i32(0), bufs[2], i32(0), i32(s), i32(s), i32(heads),
                      i32(d), np.float32(1.0 / np.sqrt(d)), i32(0))
        grid = (-(-s // vbq) * heads * vnt,)

        def launch(kern=kern, grid=grid, vnt=vnt):
            return [lab.launch(kern, grid, (vnt,))]

        row = measure(lab, launch, (o_d, q.shape), ref, runs, name, label, 4.0 * s * s * d * heads)
        if row:
            rows.append(row)
    return rows


def run(lab: Lab, shapes: list, runs: int, baseline: str = "") -> list[dict]:
    src = lib_source()
    builds = {"lib": (src, ""), "native_exp2": (src, "-Dexp2=native_exp2"),
              "extra": (extra_source(x for lines in EXTRA.values() for x in lines), "")}
    if baseline:
        builds["base"] = (baseline, "")
    rng = np.random.default_rng(1)
    rows = []
    for name, s, heads, d, tiling, bq, nt in shapes:
        variants = [("lib", tiling, bq, nt), ("native_exp2", tiling, bq, nt)]
        variants += [("base", tiling, bq, nt)] if baseline else []
        variants += [("extra", *extra_geometry(line)) for line in EXTRA[tiling]]
        rows += time_flash(lab, rng, name, s, heads, d,
                           [(f"{b} attn_flash_{t}", *builds[b], t, vbq, vnt) for b, t, vbq, vnt in variants], runs)
    return rows


# --xs (session 15): the head-dim split with the parts of a row in adjacent lanes, exchanging partial scores by
# shfl.sync (ATR_XS, built with -DSDGPU_NV_PTX=1 as the delegate does on NVIDIA) against the library's builds.
XS_EXTRA = {
    40: ["x1, 40, 4, 32, 2, 4, 1, 0.0f, 0, 2", "x2, 40, 4, 32, 2, 8, 1, 0.0f, 0, 2", "x3, 40, 4, 16, 4, 4, 1, 0.0f, 0, 2",
         "x4, 40, 3, 32, 2, 8, 1, 0.0f, 0, 2", "x5, 40, 4, 32, 2, 4, 1, 8.0f, 0, 2", "x6, 40, 4, 32, 1, 8, 1, 0.0f, 0, 2",
         "x7, 40, 4, 32, 4, 4, 1, 0.0f, 0, 2"],
    80: ["y1, 80, 4, 32, 2, 4, 1, 8.0f, 0, 4", "y2, 80, 4, 16, 2, 4, 1, 8.0f, 0, 4", "y4, 80, 4, 16, 4, 4, 1, 8.0f, 0, 4",
         "y5, 80, 4, 8, 4, 4, 1, 8.0f, 0, 4", "y6, 80, 4, 16, 2, 4, 1, 0.0f, 0, 4"],
    160: ["z1, 160, 2, 16, 4, 4, 1, 0.0f, 0, 4", "z2, 160, 2, 8, 4, 4, 1, 0.0f, 0, 4",
          "z3, 160, 4, 8, 4, 4, 1, 0.0f, 0, 8"],
}
# library tilings per head dim: (suffix, BQ, NT)
XS_LIB = {40: [("r40", 128, 128)], 80: [("r80", 64, 128), ("h80", 64, 256)],
          160: [("r160", 16, 128), ("h160", 16, 256), ("h160w", 32, 256)]}
XS_SHAPES = [(f"b{n} {s}x{s} d{d}", s, 8 * n, d) for d, s in ((40, 4096), (80, 1024), (160, 256)) for n in (1, 2)]
QUICK_XS_SHAPES = [("quick d40", 256, 2, 40), ("quick d80", 128, 2, 80), ("quick d160", 64, 2, 160)]


def run_xs(lab: Lab, shapes: list, runs: int, nv: bool, baseline: str = "") -> list[dict]:
    """Library tilings (local-memory exchange, and with -DSDGPU_NV_PTX=1 when `nv`) and XS_EXTRA (the NV build when
    `nv`, else the local-memory build: PoCL checks the instantiations' results)."""
    src = lib_source()
    extra = extra_source(x for lines in XS_EXTRA.values() for x in lines)
    nvopt, portable = "-DSDGPU_NV_PTX=1", "-DSDGPU_NV_PTX=0"  # Lab.program would add nvopt on NVIDIA by itself
    rng = np.random.default_rng(1)
    rows = []
    for name, s, heads, d in shapes:
        variants = [(f"lib {t}", src, portable, t, bq, nt) for t, bq, nt in XS_LIB[d]]
        if nv:
            variants += [(f"nv {t}", src, nvopt, t, bq, nt) for t, bq, nt in XS_LIB[d] if t.startswith("h")]
        if baseline:
            variants += [(f"base lib {t}", baseline, portable, t, bq, nt) for t, bq, nt in XS_LIB[d]]
            if nv:
                variants += [(f"base nv {t}", baseline, nvopt, t, bq, nt) for t, bq, nt in XS_LIB[d]
                             if t.startswith("h")]
        for line in XS_EXTRA[d]:
            t, bq, nt = extra_geometry(line)
            variants.append((f"{'nv' if nv else 'local'} {t} ({line.split(',', 1)[1].strip()})", extra,
                             nvopt if nv else portable, t, bq, nt))
        rows += time_flash(lab, rng, name, s, heads, d, variants, runs, report_build_errors=True)
    return rows


# --reqd (session 19): the row-wise kernels with reqd_work_group_size(NT) (ptxas then knows the work-group size:
# .reqntid) against the library's build, both from the attention file alone (no GEMM / Winograd kernels to build).
REQD_SHAPES = [("b1 4096 d40", 4096, 8, 40, [("r40", 128, 128)]), ("b2 4096 d40", 4096, 16, 40, [("r40", 128, 128)]),
               ("b1 1024 d80", 1024, 8, 80, [("h80", 64, 256)]), ("b2 1024 d80", 1024, 16, 80, [("r80", 64, 128)]),
               ("b1 256 d160", 256, 8, 160, [("h160", 16, 256)]),
               ("b2 256 d160", 256, 16, 160, [("h160x", 32, 256), ("h160w", 32, 256)])]
QUICK_REQD_SHAPES = [("quick d40", 256, 2, 40, [("r40", 128, 128)]), ("quick d80", 128, 2, 80, [("h80", 64, 256)])]


def reqd_source(src: str) -> str:
    """`src` with reqd_work_group_size(RW * NS * DS) on every ATR_INSTANTIATE kernel (the macro body's parameters)."""
    head, sep, body = src.partition("#define ATR_INSTANTIATE(")
    macro, use, rest = body.partition("ATR_INSTANTIATE(r40")  # the macro's definition ends before its first use
    if not sep or not use:
        raise ValueError("no ATR_INSTANTIATE definition and r40 instantiation in the attention source")
    attr = "KERNEL WG_SIZE((RW) * (NS) * (DS), 1, 1) void attn_"
    macro = macro.replace("KERNEL void attn_", attr)
    if macro.count(attr) != 4:
        raise ValueError(f"expected 4 row-wise kernels in ATR_INSTANTIATE, found {macro.count(attr)}")
    return head + sep + macro + use + rest


def run_reqd(lab: Lab, shapes: list, runs: int) -> list[dict]:
    src = attention_source()
    builds = {"lib": src, "reqd": reqd_source(src)}
    rng = np.random.default_rng(1)
    rows = []
    for name, s, heads, d, tilings in shapes:
        variants = [(f"{b} attn_flash_{t}", builds[b], "", t, bq, nt) for t, bq, nt in tilings for b in builds]
        rows += time_flash(lab, rng, name, s, heads, d, variants, runs, report_build_errors=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--splits", default=None, help="comma-separated key-split counts (1 = unsplit): the split sweep")
    ap.add_argument("--small", action="store_true", help="short-sequence shapes through every kernel family")
    ap.add_argument("--xs", action="store_true", help="head-dim split with shfl.sync exchange (NVIDIA) vs the library")
    ap.add_argument("--reqd", action="store_true", help="row-wise kernels with reqd_work_group_size vs the library")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout's attention program: its kernels timed next to the library's")
    args = ap.parse_args()
    baseline = args.baseline.read_text() if args.baseline else ""
    lab = Lab()
    print(f"device: {lab.describe()}", flush=True)
    if args.reqd:
        rows = run_reqd(lab, QUICK_REQD_SHAPES if args.quick else REQD_SHAPES, args.runs)
    elif args.xs:
        rows = run_xs(lab, QUICK_XS_SHAPES if args.quick else XS_SHAPES, args.runs,
                      nv="NVIDIA" in lab.dev.platform.name, baseline=baseline)
    elif args.small:
        rows = run_small(lab, QUICK_SMALL_SHAPES if args.quick else SMALL_SHAPES, args.runs, baseline)
    elif args.splits:
        rows = run_splits(lab, QUICK_SPLIT_SHAPES if args.quick else SPLIT_SHAPES, args.runs,
                          [int(x) for x in args.splits.split(",")])
    else:
        rows = run(lab, QUICK_SHAPES if args.quick else SHAPES, args.runs, baseline)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(device=lab.dev.name, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
