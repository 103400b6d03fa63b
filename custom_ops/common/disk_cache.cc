#include "common/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include "common/hash64.h"

namespace sdgpu {
namespace {

constexpr char kMagic[8] = {'S', 'D', 'G', 'P', 'U', 'C', 'E', '1'};
constexpr const char* kSuffix = ".sdc";
// A temporary file older than this is a crashed writer's leftover (a live write takes milliseconds to seconds).
constexpr time_t kStaleTempSeconds = 600;

void PutU32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void PutU64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t GetU32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Closes the descriptor it owns.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now; false (errno set) when close reports a failed write-back.
  bool Close() {
    const int fd = std::exchange(fd_, -1);
    return fd < 0 || ::close(fd) == 0;
  }

 private:
  int fd_;
};

bool ReadAll(int fd, void* dst, size_t n) {
  auto* p = static_cast<unsigned char*>(dst);
  while (n > 0) {
    const ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteAll(int fd, const void* src, size_t n) {
  const auto* p = static_cast<const unsigned char*>(src);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      if (put == 0) errno = EIO;
      return false;
    }
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// mkdir -p; true when `path` is a directory afterwards.
bool MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') ::mkdir(path.substr(0, i).c_str(), 0755);
  }
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

const char* CacheKindName(CacheKind kind) {
  switch (kind) {
    case CacheKind::kProgram: return "program";
    case CacheKind::kTiles: return "tiles";
  }
  return "unknown";
}

DiskCache::DiskCache(std::string dir, uint64_t max_bytes, const Logger& logger)
    : dir_(std::move(dir)), max_bytes_(max_bytes), logger_(logger) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

std::string DiskCache::PathOf(CacheKind kind, const std::string& key) const {
  return dir_ + "/" + CacheKindName(kind) + "-" + Hex64(Hash64(key)) + kSuffix;
}

DiskCache::Counters DiskCache::counters(CacheKind kind) const {
  const AtomicCounters& c = counters_[static_cast<int>(kind)];
  Counters out;
  out.hits = c.hits.load(std::memory_order_relaxed);
  out.misses = c.misses.load(std::memory_order_relaxed);
  out.rejected = c.rejected.load(std::memory_order_relaxed);
  out.stores = c.stores.load(std::memory_order_relaxed);
  return out;
}

void DiskCache::Reject(CacheKind kind, const std::string& path, const struct stat& opened,
                       const std::string& why) const {
  AtomicCounters& c = counters_[static_cast<int>(kind)];
  c.rejected.fetch_add(1, std::memory_order_relaxed);
  c.misses.fetch_add(1, std::memory_order_relaxed);
  // Deleted only while the name still holds the file we read: another process may have renamed a good entry over
  // it meanwhile (a remaining window only costs that entry, which is rebuilt and stored again).
  struct stat now{};
  if (::stat(path.c_str(), &now) == 0 && now.st_ino == opened.st_ino && now.st_dev == opened.st_dev) {
    ::unlink(path.c_str());
  }
  logger_.Warning(std::string("cache: ignoring ") + path + ": " + why + "; rebuilding it");
}

bool DiskCache::Load(CacheKind kind, const std::string& key, std::string* payload) const {
  if (!enabled()) return false;
  AtomicCounters& c = counters_[static_cast<int>(kind)];
  const std::string path = PathOf(kind, key);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    c.misses.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    Reject(kind, path, st, "not a regular file");
    return false;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes) {
    Reject(kind, path, st, "truncated (" + std::to_string(size) + " bytes, shorter than the header)");
    return false;
  }
  unsigned char h[kHeaderBytes];
  if (!ReadAll(fd.get(), h, kHeaderBytes)) {
    Reject(kind, path, st, "unreadable header");
    return false;
  }
  if (std::memcmp(h, kMagic, sizeof(kMagic)) != 0) {
    Reject(kind, path, st, "not a cache entry (bad magic)");
    return false;
  }
  if (GetU64(h + 48) != Hash64(h, 48)) {
    Reject(kind, path, st, "header checksum mismatch");
    return false;
  }
  const uint32_t version = GetU32(h + 8);
  if (version != kFormatVersion) {
    Reject(kind, path, st, "format version " + std::to_string(version) + ", expected " + std::to_string(kFormatVersion));
    return false;
  }
  if (GetU32(h + 12) != static_cast<uint32_t>(kind)) {
    Reject(kind, path, st, "entry of another kind");
    return false;
  }
  const uint64_t key_bytes = GetU64(h + 16), payload_bytes = GetU64(h + 24);
  if (key_bytes > kMaxKeyBytes || payload_bytes > kMaxPayloadBytes) {
    Reject(kind, path, st, "implausible sizes in the header");
    return false;
  }
  if (kHeaderBytes + key_bytes + payload_bytes != size) {
    Reject(kind, path, st, "size " + std::to_string(size) + " bytes, the header says " +
                           std::to_string(kHeaderBytes + key_bytes + payload_bytes) + " (truncated or extended)");
    return false;
  }
  if (key_bytes != key.size() || GetU64(h + 40) != Hash64(key)) {
    Reject(kind, path, st, "foreign entry (another key under this name)");
    return false;
  }
  std::string stored_key(static_cast<size_t>(key_bytes), '\0');
  std::string data(static_cast<size_t>(payload_bytes), '\0');
  if (!ReadAll(fd.get(), stored_key.data(), stored_key.size()) || !ReadAll(fd.get(), data.data(), data.size())) {
    Reject(kind, path, st, "short read");
    return false;
  }
  if (stored_key != key) {
    Reject(kind, path, st, "foreign entry (another key under this name)");
    return false;
  }
  if (Hash64(data) != GetU64(h + 32)) {
    Reject(kind, path, st, "payload checksum mismatch (corrupt)");
    return false;
  }
  ::futimens(fd.get(), nullptr);  // LRU: a hit makes the entry the most recently used (best effort)
  c.hits.fetch_add(1, std::memory_order_relaxed);
  *payload = std::move(data);
  return true;
}

void DiskCache::StoreFailed(const std::string& what, int err) const {
  store_failures_.fetch_add(1, std::memory_order_relaxed);
  if (writable_.exchange(false)) {
    logger_.Warning("cache: cannot write to " + dir_ + " (" + what + ": " + std::strerror(err) +
                    "); running on without storing set-up results");
  }
}

void DiskCache::Store(CacheKind kind, const std::string& key, const std::string& payload) const {
  if (!enabled() || !writable_.load(std::memory_order_relaxed)) return;
  if (key.size() > kMaxKeyBytes || payload.size() > kMaxPayloadBytes) return;
  const uint64_t total = kHeaderBytes + key.size() + payload.size();
  if (total > max_bytes_) return;  // would evict everything and still not fit
  if (!MakeDirs(dir_)) {
    StoreFailed("creating the folder", errno != 0 ? errno : ENOTDIR);
    return;
  }
  unsigned char h[kHeaderBytes] = {};
  std::memcpy(h, kMagic, sizeof(kMagic));
  PutU32(h + 8, kFormatVersion);
  PutU32(h + 12, static_cast<uint32_t>(kind));
  PutU64(h + 16, key.size());
  PutU64(h + 24, payload.size());
  PutU64(h + 32, Hash64(payload));
  PutU64(h + 40, Hash64(key));
  PutU64(h + 48, Hash64(h, 48));
  const std::string path = PathOf(kind, key);
  static std::atomic<unsigned long long> serial{0};
  const std::string name = path.substr(dir_.size() + 1);
  const std::string tmp = dir_ + "/." + name + ".tmp" + std::to_string(::getpid()) + "." +
                          std::to_string(serial.fetch_add(1, std::memory_order_relaxed));
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    StoreFailed("creating " + tmp, errno);
    return;
  }
  const bool written = WriteAll(fd.get(), h, kHeaderBytes) && WriteAll(fd.get(), key.data(), key.size()) &&
                       WriteAll(fd.get(), payload.data(), payload.size());
  const int write_err = errno;
  if (!written || !fd.Close()) {
    const int err = written ? errno : write_err;
    ::unlink(tmp.c_str());
    StoreFailed("writing " + tmp, err);
    return;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    StoreFailed("renaming " + tmp, err);
    return;
  }
  counters_[static_cast<int>(kind)].stores.fetch_add(1, std::memory_order_relaxed);
  Evict(path);
}

void DiskCache::Evict(const std::string& keep) const {
  struct Entry {
    std::string path;
    struct timespec mtime;
    uint64_t bytes;
  };
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return;
  std::vector<Entry> entries;
  uint64_t total = 0;
  const time_t now = std::time(nullptr);
  for (struct dirent* e; (e = ::readdir(d)) != nullptr;) {
    const std::string name = e->d_name;
    const bool temp = name.size() > 1 && name[0] == '.' && name.find(".tmp") != std::string::npos;
    if (!temp && (name[0] == '.' || !EndsWith(name, kSuffix))) continue;
    const std::string path = dir_ + "/" + name;
    struct stat st{};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (temp) {  // a crashed writer's leftover
      if (now - st.st_mtim.tv_sec > kStaleTempSeconds) ::unlink(path.c_str());
      continue;
    }
    entries.push_back(Entry{path, st.st_mtim, static_cast<uint64_t>(st.st_size)});
    total += static_cast<uint64_t>(st.st_size);
  }
  ::closedir(d);
  if (total <= max_bytes_) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec : a.mtime.tv_nsec < b.mtime.tv_nsec;
  });
  for (const Entry& e : entries) {
    if (total <= max_bytes_) break;
    if (e.path == keep) continue;
    if (::unlink(e.path.c_str()) == 0 || errno == ENOENT) {  // ENOENT: another process evicted it first
      total -= e.bytes;
      evictions_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace sdgpu
