"""SASS of chosen OpenCL kernels on an NVIDIA device: the driver's PTX (pyopencl program binaries) through the
ptxas / cuobjdump that Triton ships, with per-kernel registers, spills and an instruction histogram.

    python3 scripts/h200/sass_dump.py --out $OUT/sass [--lds-lab] kernel_name ...

The library source (cl_lab.lib_source) is always built; --lds-lab adds lds_lab.py's variants. Writes one
``<kernel>.sass`` per kernel and ``summary.json`` (registers, spill bytes, counts of FFMA / LDS / LDG / BAR ...).
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cl_lab import Lab, lib_source  # noqa: E402


def find_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for root in ("/usr", "/opt", "/root", "/home", "/tmp"):
        for p in Path(root).rglob(name):
            if p.is_file():
                return str(p)
    return None


def sass_for(ptx: str, ptxas: str, cuobjdump: str, workdir: Path) -> tuple[str, str]:
    src, cubin = workdir / "p.ptx", workdir / "p.cubin"
    src.write_text(ptx)
    r = subprocess.run([ptxas, "-arch=sm_90", "-O3", "-v", str(src), "-o", str(cubin)], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    d = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True)
    return r.stderr, d.stdout


def split_functions(sass: str) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    cur = None
    for line in sass.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = m.group(1)
            out[cur] = []
        elif cur:
            out[cur].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def histogram(text: str) -> dict[str, int]:
    h: collections.Counter = collections.Counter()
    for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", text):
        op = m.group(1)
        base = op.split(".")[0]
        h[base] += 1
        if base in ("LDS", "LDG", "STS", "LD", "LDL", "STL"):
            h[op] += 1
    return dict(h.most_common())


def registers(ptxas_log: str) -> dict[str, dict]:
    res, cur = {}, None
    for line in ptxas_log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = m.group(1)
            res[cur] = {}
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            res[cur]["spill_st"], res[cur]["spill_ld"] = int(m.group(1)), int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            res[cur]["regs"] = int(m.group(1))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernels", nargs="*")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--extra", action="append", default=[], help="FILE:OPTIONS another OpenCL source to build")
    a = ap.parse_args()
    ptxas, cuobjdump = find_tool("ptxas"), find_tool("cuobjdump")
    print("ptxas", ptxas, "cuobjdump", cuobjdump, flush=True)
    if not ptxas or not cuobjdump:
        return 1
    a.out.mkdir(parents=True, exist_ok=True)
    lab = Lab()
    cl = lab.cl
    builds = [("lib", lib_source(), "")]
    for spec in a.extra:
        path, _, opts = spec.partition(":")
        builds.append((Path(path).stem + opts.replace(" ", "").replace("-D", "_"), Path(path).read_text(), opts))
    summary = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tag, src, opts in builds:
            prg = lab.program(src, opts)
            ptx = bytes(prg.get_info(cl.program_info.BINARIES)[0]).rstrip(b"\0").decode()
            log, sass = sass_for(ptx, ptxas, cuobjdump, Path(tmp))
            regs = registers(log)
            for fn, text in split_functions(sass).items():
                if tag == "lib" and a.kernels and fn not in a.kernels:
                    continue
                name = f"{tag}.{fn}"
                (a.out / f"{name}.sass").write_text(text)
                summary[name] = {**regs.get(fn, {}), "ops": histogram(text)}
                print(name, summary[name].get("regs"), summary[name].get("spill_st"),
                      {k: v for k, v in summary[name]["ops"].items() if k in ("FFMA", "LDS", "LDS.128", "LDG", "BAR")},
                      flush=True)
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
