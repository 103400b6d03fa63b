// A C entry point over DiskCache and Hash64 for tests (tests/native/test_disk_cache.py compiles it with disk_cache.cc
// and log.cc into a throwaway library and calls it through ctypes). Not part of the delegate, which reaches the
// cache through its GPU backends.
#include <cstdint>
#include <cstring>
#include <string>

#include "common/disk_cache.h"
#include "common/hash64.h"

namespace {

sdgpu::CacheKind KindOf(int kind) { return kind == 1 ? sdgpu::CacheKind::kTiles : sdgpu::CacheKind::kProgram; }

}  // namespace

extern "C" {

uint64_t sdcache_hash64(const void* data, size_t n, uint64_t seed) { return sdgpu::Hash64(data, n, seed); }

// A cache over `dir` capped at `max_bytes`, logging at `log_level` (0 silent .. 4 debug) to stderr.
void* sdcache_open(const char* dir, uint64_t max_bytes, int log_level) {
  return new sdgpu::DiskCache(dir != nullptr ? dir : "", max_bytes, sdgpu::Logger(static_cast<sdgpu::LogLevel>(log_level)));
}

void sdcache_close(void* cache) { delete static_cast<sdgpu::DiskCache*>(cache); }

void sdcache_store(void* cache, int kind, const char* key, const void* data, size_t n) {
  static_cast<sdgpu::DiskCache*>(cache)->Store(KindOf(kind), key, std::string(static_cast<const char*>(data), n));
}

// Returns the payload's length (copied into `out` up to `cap`), or -1 on a miss.
long long sdcache_load(void* cache, int kind, const char* key, void* out, size_t cap) {
  std::string payload;
  if (!static_cast<sdgpu::DiskCache*>(cache)->Load(KindOf(kind), key, &payload)) return -1;
  std::memcpy(out, payload.data(), payload.size() < cap ? payload.size() : cap);
  return static_cast<long long>(payload.size());
}

// The entry's file path (NUL-terminated in `out`); its full length.
size_t sdcache_path(void* cache, int kind, const char* key, char* out, size_t cap) {
  const std::string p = static_cast<sdgpu::DiskCache*>(cache)->PathOf(KindOf(kind), key);
  if (cap > 0) {
    const size_t n = p.size() < cap - 1 ? p.size() : cap - 1;
    std::memcpy(out, p.data(), n);
    out[n] = '\0';
  }
  return p.size();
}

// hits, misses, rejected, stores of `kind`, then store_failures and evictions.
void sdcache_counters(void* cache, int kind, long long* out6) {
  const auto* c = static_cast<sdgpu::DiskCache*>(cache);
  const sdgpu::DiskCache::Counters k = c->counters(KindOf(kind));
  out6[0] = k.hits;
  out6[1] = k.misses;
  out6[2] = k.rejected;
  out6[3] = k.stores;
  out6[4] = c->store_failures();
  out6[5] = c->evictions();
}

}  // extern "C"
