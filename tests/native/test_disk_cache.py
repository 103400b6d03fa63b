"""The delegate's persistent cache (custom_ops/common/disk_cache.h) on its own: entry layout, every way an entry can be
broken (each detected, logged once, deleted, a miss), atomic replace under racing writers, LRU eviction under the size
cap, an unwritable folder. The fixture compiles disk_cache.cc, log.cc and a small C entry point into a throwaway
library (about 2 s); test_delegate_cache.py covers the cache through the delegate on PoCL and llvmpipe.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "custom_ops"
PROGRAM, TILES = 0, 1
HEADER = 56
MASK = (1 << 64) - 1


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    assert cxx, "a C++17 compiler is required for the native tests"
    out = tmp_path_factory.mktemp("cache") / "libcache_test.so"
    srcs = [SRC / "common/disk_cache.cc", SRC / "common/log.cc", SRC / "common/disk_cache_testing_c_api.cc"]
    subprocess.run([cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Werror", f"-I{SRC}", *map(str, srcs),
                    "-o", str(out)], check=True)
    lib = ctypes.CDLL(str(out))
    lib.sdcache_hash64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    lib.sdcache_hash64.restype = ctypes.c_uint64
    lib.sdcache_open.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int]
    lib.sdcache_open.restype = ctypes.c_void_p
    lib.sdcache_close.argtypes = [ctypes.c_void_p]
    lib.sdcache_store.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.sdcache_load.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.sdcache_load.restype = ctypes.c_longlong
    lib.sdcache_path.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.sdcache_path.restype = ctypes.c_size_t
    lib.sdcache_counters.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_longlong)]
    return lib


class Cache:
    def __init__(self, lib: ctypes.CDLL, folder: Path | str, max_bytes: int = 1 << 30, log_level: int = 2) -> None:
        self.lib = lib
        self.h = lib.sdcache_open(str(folder).encode(), max_bytes, log_level)

    def close(self) -> None:
        self.lib.sdcache_close(self.h)

    def store(self, kind: int, key: str, payload: bytes) -> None:
        self.lib.sdcache_store(self.h, kind, key.encode(), payload, len(payload))

    def load(self, kind: int, key: str) -> bytes | None:
        buf = ctypes.create_string_buffer(1 << 20)
        n = self.lib.sdcache_load(self.h, kind, key.encode(), buf, len(buf))
        return None if n < 0 else buf.raw[:n]

    def path(self, kind: int, key: str) -> Path:
        buf = ctypes.create_string_buffer(4096)
        self.lib.sdcache_path(self.h, kind, key.encode(), buf, len(buf))
        return Path(buf.value.decode())

    def counters(self, kind: int) -> dict[str, int]:
        out = (ctypes.c_longlong * 6)()
        self.lib.sdcache_counters(self.h, kind, out)
        return dict(zip(("hits", "misses", "rejected", "stores", "store_failures", "evictions"), out))


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & MASK


def hash64(data: bytes, seed: int = 0) -> int:
    """The cache's Hash64 (XXH64 construction) in Python: lets the tests forge entries with a valid header."""
    p1, p2, p3, p4, p5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                          0x27D4EB2F165667C5)

    def rnd(acc: int, v: int) -> int:
        return (_rotl((acc + v * p2) & MASK, 31) * p1) & MASK

    n, i = len(data), 0
    if n >= 32:
        v = [(seed + p1 + p2) & MASK, (seed + p2) & MASK, seed, (seed - p1) & MASK]
        while i + 32 <= n:
            v = [rnd(v[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little")) for k in range(4)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & MASK
        for x in v:
            h = ((h ^ rnd(0, x)) * p1 + p4) & MASK
    else:
        h = (seed + p5) & MASK
    h = (h + n) & MASK
    while i + 8 <= n:
        h = (_rotl(h ^ rnd(0, int.from_bytes(data[i:i + 8], "little")), 27) * p1 + p4) & MASK
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ ((int.from_bytes(data[i:i + 4], "little") * p1) & MASK), 23) * p2 + p3) & MASK
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * p5) & MASK), 11) * p1) & MASK
        i += 1
    h ^= h >> 33
    h = (h * p2) & MASK
    h ^= h >> 29
    h = (h * p3) & MASK
    return h ^ (h >> 32)


def test_hash64_python_port_matches_and_is_the_xxh64_construction(lib: ctypes.CDLL) -> None:
    for n in (0, 1, 3, 4, 7, 8, 31, 32, 33, 63, 64, 100, 1000):
        data = bytes((i * 37 + n) & 0xFF for i in range(n))
        for seed in (0, 1, 0xDEADBEEF):
            assert lib.sdcache_hash64(data, n, seed) == hash64(data, seed)
    assert hash64(b"") == 0xEF46DB3751D8E999  # XXH64's published value for the empty input


def test_entry_layout_round_trip_and_lru_touch(lib: ctypes.CDLL, tmp_path: Path) -> None:
    c = Cache(lib, tmp_path / "c")
    assert c.load(TILES, "k") is None and c.counters(TILES)["misses"] == 1
    c.store(TILES, "k", b"tiles v1 64 64 256 1 0 0")
    path = c.path(TILES, "k")
    assert path.parent == tmp_path / "c" and path.name == f"tiles-{hash64(b'k'):016x}.sdc"
    raw = path.read_bytes()
    assert raw[:8] == b"SDGPUCE1" and int.from_bytes(raw[8:12], "little") == 1
    assert int.from_bytes(raw[12:16], "little") == TILES
    assert int.from_bytes(raw[16:24], "little") == 1 and int.from_bytes(raw[24:32], "little") == 24
    assert int.from_bytes(raw[32:40], "little") == hash64(b"tiles v1 64 64 256 1 0 0")
    assert int.from_bytes(raw[40:48], "little") == hash64(b"k")
    assert int.from_bytes(raw[48:56], "little") == hash64(raw[:48])
    assert raw[HEADER:] == b"k" + b"tiles v1 64 64 256 1 0 0" and len(raw) == HEADER + 1 + 24
    os.utime(path, (1, 1))
    assert c.load(TILES, "k") == b"tiles v1 64 64 256 1 0 0"
    assert path.stat().st_mtime > 1e9  # a hit makes the entry the most recently used
    assert c.counters(TILES) == {"hits": 1, "misses": 1, "rejected": 0, "stores": 1, "store_failures": 0,
                                 "evictions": 0}
    assert c.load(PROGRAM, "k") is None  # kinds are separate entries
    assert not [p for p in path.parent.iterdir() if ".tmp" in p.name]  # no temporary left behind
    c.close()


def _forge(raw: bytes, *, version: int | None = None, kind: int | None = None, key: bytes | None = None) -> bytes:
    """`raw` with some header fields replaced and every checksum recomputed (a well-formed entry of another format
    version, kind or key)."""
    key_len = int.from_bytes(raw[16:24], "little")
    old_key, payload = raw[HEADER:HEADER + key_len], raw[HEADER + key_len:]
    key = old_key if key is None else key
    h = bytearray(raw[:HEADER])
    if version is not None:
        h[8:12] = version.to_bytes(4, "little")
    if kind is not None:
        h[12:16] = kind.to_bytes(4, "little")
    h[16:24] = len(key).to_bytes(8, "little")
    h[40:48] = hash64(key).to_bytes(8, "little")
    h[48:56] = hash64(bytes(h[:48])).to_bytes(8, "little")
    return bytes(h) + key + payload


BREAKS = {
    "truncated": (lambda raw: raw[:-5], "truncated or extended"),
    "truncated header": (lambda raw: raw[:20], "shorter than the header"),
    "extended": (lambda raw: raw + b"\0", "truncated or extended"),
    "bit flip in the payload": (lambda raw: raw[:-3] + bytes([raw[-3] ^ 0x10]) + raw[-2:], "payload checksum"),
    "bit flip in the header": (lambda raw: raw[:20] + bytes([raw[20] ^ 1]) + raw[21:], "header checksum"),
    "bad magic": (lambda raw: b"XDGPUCE1" + raw[8:], "bad magic"),
    "wrong format version": (lambda raw: _forge(raw, version=99), "format version 99, expected 1"),
    "another kind": (lambda raw: _forge(raw, kind=PROGRAM), "another kind"),
    "foreign key": (lambda raw: _forge(raw, key=b"some other key"), "foreign entry"),
    "empty": (lambda raw: b"", "shorter than the header"),
}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_a_broken_entry_is_one_log_line_a_miss_and_gone(lib: ctypes.CDLL, tmp_path: Path, name: str, capfd) -> None:
    """The logger writes to fd 2: read through a pipe, so the one line is checked exactly."""
    folder = tmp_path / "c"
    c = Cache(lib, folder, log_level=0)
    c.store(TILES, "problem", b"tiles v1 64 64 256 1 0 0")
    path = c.path(TILES, "problem")
    c.close()
    breaker, why = BREAKS[name]
    path.write_bytes(breaker(path.read_bytes()))
    capfd.readouterr()
    c = Cache(lib, folder, log_level=2)
    got = c.load(TILES, "problem")
    counters = c.counters(TILES)
    again = c.load(TILES, "problem")
    c.close()
    log = capfd.readouterr().err  # the delegate writes to fd 2
    assert got is None and again is None
    assert counters["rejected"] == 1 and counters["misses"] == 1 and counters["hits"] == 0
    lines = log.splitlines()
    assert len(lines) == 1, log
    assert lines[0].startswith(f"sdgpu: WARNING: cache: ignoring {path}: ") and why in lines[0]
    assert lines[0].endswith("; rebuilding it")
    assert not path.exists()  # deleted: the caller rebuilds and stores it again
    c = Cache(lib, folder, log_level=0)
    c.store(TILES, "problem", b"tiles v1 64 64 256 1 0 0")
    assert c.load(TILES, "problem") == b"tiles v1 64 64 256 1 0 0"
    c.close()


def test_lru_eviction_under_the_cap_keeps_the_recently_used(lib: ctypes.CDLL, tmp_path: Path) -> None:
    entry = HEADER + 2 + 1000  # key "kN" + payload
    c = Cache(lib, tmp_path / "c", max_bytes=3 * entry + 10, log_level=0)
    for i in range(3):
        c.store(PROGRAM, f"k{i}", bytes([i]) * 1000)
        os.utime(c.path(PROGRAM, f"k{i}"), (1000 + i, 1000 + i))
    assert c.load(PROGRAM, "k0") == bytes([0]) * 1000  # k0 is now the most recently used; k1 the least
    c.store(PROGRAM, "k3", bytes([3]) * 1000)  # the folder would hold 4 entries: the least recently used goes
    names = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert names == sorted(c.path(PROGRAM, k).name for k in ("k0", "k2", "k3"))
    assert c.counters(PROGRAM)["evictions"] == 1
    assert sum(p.stat().st_size for p in (tmp_path / "c").iterdir()) <= 3 * entry + 10
    c.store(PROGRAM, "huge", b"x" * (4 * entry))  # larger than the cap alone: not stored, nothing evicted for it
    assert c.load(PROGRAM, "huge") is None and c.counters(PROGRAM)["evictions"] == 1
    # a crashed writer's temporary file: removed by the next store once it is old
    stale = tmp_path / "c" / ".program-0000000000000000.sdc.tmp1.0"
    stale.write_bytes(b"partial")
    os.utime(stale, (1, 1))
    c.store(TILES, "t", b"tiles v1 64 64 256 1 0 0")
    assert not stale.exists()
    c.close()


def test_unwritable_folder_warns_once_and_reads_still_miss(lib: ctypes.CDLL, tmp_path: Path, capfd) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    capfd.readouterr()
    c = Cache(lib, blocker / "cache", log_level=2)
    for i in range(3):
        c.store(TILES, f"k{i}", b"payload")
    got = c.load(TILES, "k0")
    counters = c.counters(TILES)
    c.close()
    log = capfd.readouterr().err  # the delegate writes to fd 2
    assert got is None and counters["store_failures"] == 1 and counters["stores"] == 0
    assert log.count("\n") == 1 and log.startswith(f"sdgpu: WARNING: cache: cannot write to {blocker / 'cache'} (")
    assert "running on without storing set-up results" in log


def test_disabled_cache_touches_nothing(lib: ctypes.CDLL, tmp_path: Path) -> None:
    c = Cache(lib, "", log_level=0)
    c.store(TILES, "k", b"x")
    assert c.load(TILES, "k") is None
    assert c.counters(TILES) == {"hits": 0, "misses": 0, "rejected": 0, "stores": 0, "store_failures": 0,
                                 "evictions": 0}
    c.close()


WRITER = """
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.sdcache_open.restype = ctypes.c_void_p
lib.sdcache_open.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int]
lib.sdcache_store.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
lib.sdcache_load.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
lib.sdcache_load.restype = ctypes.c_longlong
c = lib.sdcache_open(sys.argv[2].encode(), 1 << 30, 2)
payload = bytes(range(256)) * 4096  # 1 MiB: a write takes long enough to interleave with the other process
buf = ctypes.create_string_buffer(len(payload))
end = time.time() + 2.0
rounds = bad = 0
while time.time() < end:
    lib.sdcache_store(c, 0, b"shared key", payload, len(payload))
    n = lib.sdcache_load(c, 0, b"shared key", buf, len(buf))
    bad += n != len(payload) or buf.raw != payload
    rounds += 1
print(rounds, bad)
"""


def test_racing_writers_and_readers_always_see_a_whole_entry(lib: ctypes.CDLL, tmp_path: Path) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, lib._name, str(tmp_path / "c")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        rounds, bad = map(int, out.split())
        assert rounds > 0 and bad == 0, (out, err)
        assert err == ""  # no entry was ever rejected: renames are atomic
    # only the entry: every temporary file was renamed or removed
    assert [p.name for p in (tmp_path / "c").iterdir()] == [f"program-{hash64(b'shared key'):016x}.sdc"]
