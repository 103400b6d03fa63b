// The delegate's persistent cache: ONE folder (delegate option cache_dir) shared by every backend, delegate and
// process, holding what a GPU backend would otherwise redo at every start: compiled programs (OpenCL program
// binaries, GL program binaries) and measured GEMM tile choices (gpu::TileTuner). Prepared weights are not stored:
// producing them on the GPU from the model's own bytes is cheaper than reading them back (BENCHMARKS.md, "Cold
// start"), and a key over their source bytes would have to read all of them anyway.
//
// One file per entry, <kind>-<16 hex digits of the key's hash>.sdc:
//   [0, 8)    magic "SDGPUCE1"
//   [8, 12)   format version (kFormatVersion), uint32 LE
//   [12, 16)  kind (CacheKind), uint32 LE
//   [16, 24)  key bytes, uint64 LE (<= kMaxKeyBytes)
//   [24, 32)  payload bytes, uint64 LE
//   [32, 40)  Hash64 of the payload
//   [40, 48)  Hash64 of the key
//   [48, 56)  Hash64 of bytes [0, 48) (the header's own checksum)
//   [56, ...) the key, then the payload; nothing after it.
// The key is the full description of what the payload depends on (device, driver, delegate build, source or problem,
// options), so a file that hashes to the same name but holds another key is a foreign entry, not a hit.
//
// Entries are untrusted input: every read is bounds-checked, and an entry whose size, magic, version, kind, key or
// checksums disagree is reported with ONE log line, deleted and counted as rejected; the caller rebuilds it (a miss).
// Writes go to a temporary file in the folder that is then renamed over the entry (atomic on POSIX), so readers see
// the old entry, the new one or none, and racing writers all succeed (the last rename wins; they wrote the same
// key). A hit refreshes the entry's mtime; a store that takes the folder over max_bytes deletes the least recently
// used entries first. A folder that cannot be written costs one warning at the first failed store; the delegate
// runs on without storing (a read-only folder still serves its entries).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include <sys/stat.h>

#include "common/log.h"

namespace sdgpu {

enum class CacheKind : int { kProgram = 0, kTiles = 1 };
constexpr int kNumCacheKinds = 2;
// "program", "tiles": the entry files' prefix and the stats' per-kind keys.
const char* CacheKindName(CacheKind kind);

class DiskCache {
 public:
  static constexpr uint32_t kFormatVersion = 1;
  static constexpr size_t kHeaderBytes = 56;
  static constexpr uint64_t kMaxKeyBytes = 1u << 16;
  static constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 31;  // larger is "implausible", never a payload

  struct Counters {
    long long hits = 0, misses = 0, rejected = 0, stores = 0;
  };

  // `dir` empty: disabled (loads miss without counting, stores do nothing). `max_bytes`: the folder's size cap.
  DiskCache(std::string dir, uint64_t max_bytes, const Logger& logger);
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  uint64_t max_bytes() const { return max_bytes_; }

  // The payload of entry (kind, key): true on a valid hit. A missing entry is a miss; an invalid one is logged,
  // deleted and counted as rejected (and as a miss).
  bool Load(CacheKind kind, const std::string& key, std::string* payload) const;
  // Stores (kind, key) -> payload (atomic replace), then evicts over the cap. Never fails the caller.
  void Store(CacheKind kind, const std::string& key, const std::string& payload) const;

  // The entry's path (tests, diagnostics).
  std::string PathOf(CacheKind kind, const std::string& key) const;

  Counters counters(CacheKind kind) const;
  long long store_failures() const { return store_failures_.load(std::memory_order_relaxed); }
  long long evictions() const { return evictions_.load(std::memory_order_relaxed); }

 private:
  struct AtomicCounters {
    std::atomic<long long> hits{0}, misses{0}, rejected{0}, stores{0};
  };
  // `opened`: fstat of the file read (only that file is deleted).
  void Reject(CacheKind kind, const std::string& path, const struct stat& opened, const std::string& why) const;
  void StoreFailed(const std::string& what, int err) const;
  void Evict(const std::string& keep) const;

  std::string dir_;
  uint64_t max_bytes_;
  Logger logger_;
  mutable std::array<AtomicCounters, kNumCacheKinds> counters_;
  mutable std::atomic<long long> store_failures_{0};
  mutable std::atomic<long long> evictions_{0};
  mutable std::atomic<bool> writable_{true};  // false after the first failed store (one warning, then silence)
};

}  // namespace sdgpu
