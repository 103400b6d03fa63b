"""List OpenCL platforms and devices through the ICD loader (ctypes; no clinfo needed on the device).

``python3 -m bench.cl_info`` prints one line per device; ``--json`` the full records. Every OpenCL
call's status is checked; a missing loader or no platform is reported as such (exit status 1).
"""
from __future__ import annotations

import ctypes
import json
import sys
from typing import Any

CL_SUCCESS = 0
CL_PLATFORM_NOT_FOUND_KHR = -1001
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
PLATFORM_INFO = {"name": 0x0902, "vendor": 0x0903, "version": 0x0901}
CL_DEVICE_TYPE = 0x1000
CL_DEVICE_TYPE_GPU = 1 << 2
DEVICE_STR_INFO = {"name": 0x102B, "vendor": 0x102C, "driver_version": 0x102D, "version": 0x102F}
CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002  # cl_uint
CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F  # cl_ulong


class ClError(RuntimeError):
    pass


def _lib() -> ctypes.CDLL:
    for name in ("libOpenCL.so.1", "libOpenCL.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        vp, u32, sz = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_size_t
        lib.clGetPlatformIDs.argtypes = [u32, ctypes.POINTER(vp), ctypes.POINTER(u32)]
        lib.clGetPlatformInfo.argtypes = [vp, u32, sz, vp, ctypes.POINTER(sz)]
        lib.clGetDeviceIDs.argtypes = [vp, ctypes.c_uint64, u32, ctypes.POINTER(vp), ctypes.POINTER(u32)]
        lib.clGetDeviceInfo.argtypes = [vp, u32, sz, vp, ctypes.POINTER(sz)]
        for f in (lib.clGetPlatformIDs, lib.clGetPlatformInfo, lib.clGetDeviceIDs, lib.clGetDeviceInfo):
            f.restype = ctypes.c_int32
        return lib
    raise ClError("no OpenCL ICD loader (libOpenCL.so.1) found")


def _check(rc: int, what: str) -> None:
    if rc != CL_SUCCESS:
        raise ClError(f"{what} failed with OpenCL error {rc}")


def _info_str(fn, handle, param: int, what: str) -> str:
    size = ctypes.c_size_t(0)
    _check(fn(handle, param, 0, None, ctypes.byref(size)), what)
    buf = ctypes.create_string_buffer(size.value or 1)
    _check(fn(handle, param, size, buf, None), what)
    return buf.value.decode("utf-8", "replace").strip()


def _info_num(fn, handle, param: int, ctype, what: str) -> int:
    value = ctype(0)
    _check(fn(handle, param, ctypes.sizeof(value), ctypes.byref(value), None), what)
    return int(value.value)


def devices() -> list[dict[str, Any]]:
    """One record per (platform, device); GPU devices first (the delegate takes the first GPU of any platform)."""
    lib = _lib()
    count = ctypes.c_uint32(0)
    rc = lib.clGetPlatformIDs(0, None, ctypes.byref(count))
    if rc == CL_PLATFORM_NOT_FOUND_KHR or (rc == CL_SUCCESS and count.value == 0):
        raise ClError("the OpenCL loader found no platform (no /etc/OpenCL/vendors/*.icd for a working driver?)")
    _check(rc, "clGetPlatformIDs")
    platforms = (ctypes.c_void_p * count.value)()
    _check(lib.clGetPlatformIDs(count.value, platforms, None), "clGetPlatformIDs")
    out = []
    for p in platforms:
        plat = {k: _info_str(lib.clGetPlatformInfo, p, v, "clGetPlatformInfo") for k, v in PLATFORM_INFO.items()}
        n = ctypes.c_uint32(0)
        rc = lib.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(n))
        if rc != CL_SUCCESS or n.value == 0:
            out.append({"platform": plat, "error": f"clGetDeviceIDs: {rc}, {n.value} devices"})
            continue
        devs = (ctypes.c_void_p * n.value)()
        _check(lib.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n.value, devs, None), "clGetDeviceIDs")
        for d in devs:
            rec: dict[str, Any] = {"platform": plat}
            rec.update({k: _info_str(lib.clGetDeviceInfo, d, v, "clGetDeviceInfo") for k, v in DEVICE_STR_INFO.items()})
            rec["is_gpu"] = bool(_info_num(lib.clGetDeviceInfo, d, CL_DEVICE_TYPE, ctypes.c_uint64,
                                           "clGetDeviceInfo") & CL_DEVICE_TYPE_GPU)
            rec["compute_units"] = _info_num(lib.clGetDeviceInfo, d, CL_DEVICE_MAX_COMPUTE_UNITS, ctypes.c_uint32,
                                             "clGetDeviceInfo")
            rec["global_mem_gib"] = round(_info_num(lib.clGetDeviceInfo, d, CL_DEVICE_GLOBAL_MEM_SIZE, ctypes.c_uint64,
                                                    "clGetDeviceInfo") / 2**30, 1)
            out.append(rec)
    return sorted(out, key=lambda r: not r.get("is_gpu", False))


def summary() -> tuple[list[dict[str, Any]], str]:
    """``(records, error)``; error is "" on success."""
    try:
        return devices(), ""
    except ClError as exc:
        return [], str(exc)


def main() -> int:
    recs, err = summary()
    if err:
        print(f"OpenCL: {err}")
        return 1
    if "--json" in sys.argv[1:]:
        print(json.dumps(recs, indent=2))
        return 0
    for r in recs:
        if "error" in r:
            print(f"OpenCL: {r['platform']['name']}: {r['error']}")
            continue
        print(f"OpenCL: {r['platform']['name']} ({r['platform']['version']}): {r['name']} | driver "
              f"{r['driver_version']} | {r['version']} | {r['compute_units']} CUs | {r['global_mem_gib']} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
