#include "common/host_pages.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace sdgpu {

FileMappedPages FileMappedPages::Snapshot() {
  FileMappedPages pages;
#if defined(__linux__)
  std::FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return pages;
  char line[4096];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    // "begin-end perms offset dev inode [path]"; a line longer than the buffer continues in the next read and
    // fails this parse (its path is not needed)
    unsigned long long begin = 0, end = 0, offset = 0, inode = 0;
    char perms[8] = {0}, dev[32] = {0};
    if (std::sscanf(line, "%llx-%llx %7s %llx %31s %llu", &begin, &end, perms, &offset, dev, &inode) != 6) continue;
    if (inode == 0 || std::strlen(perms) < 4 || perms[0] != 'r' || perms[1] != '-' || perms[3] != 's') continue;
    pages.ranges_.push_back({static_cast<uintptr_t>(begin), static_cast<uintptr_t>(end)});
  }
  std::fclose(f);
  std::sort(pages.ranges_.begin(), pages.ranges_.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
#endif
  return pages;
}

size_t FileMappedPages::Release(const void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_DONTNEED)
  if (p == nullptr || bytes == 0 || ranges_.empty()) return 0;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + bytes;
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), begin,
                             [](uintptr_t v, const Range& r) { return v < r.begin; });
  if (it == ranges_.begin()) return 0;
  --it;
  if (begin < it->begin || end > it->end) return 0;
  const long page_size = sysconf(_SC_PAGESIZE);
  if (page_size <= 0) return 0;
  const uintptr_t page = static_cast<uintptr_t>(page_size);
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;  // whole pages inside
  if (last <= first) return 0;
  if (madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
  if (!released_.empty() && released_.back().end == first) {  // weights lie back to back: one range for a run
    released_.back().end = last;
  } else if (!released_.empty() && released_.back().begin == last) {
    released_.back().begin = first;
  } else {
    released_.push_back({first, last});
  }
  return last - first;
#else
  (void)p;
  (void)bytes;
  return 0;
#endif
}

void FileMappedPages::ReleaseAgain() const {
#if defined(__linux__) && defined(MADV_DONTNEED)
  // advice: a failure only leaves pages resident, as they were
  for (const Range& r : released_) (void)madvise(reinterpret_cast<void*>(r.begin), r.end - r.begin, MADV_DONTNEED);
#endif
}

AnonymousBuffer::AnonymousBuffer(size_t bytes) {
  if (bytes == 0) return;
#if defined(__linux__)
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  data_ = p;
#else
  data_ = std::calloc(bytes, 1);
  if (data_ == nullptr) return;
#endif
  bytes_ = bytes;
}

AnonymousBuffer& AnonymousBuffer::operator=(AnonymousBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void AnonymousBuffer::reset() {
  if (data_ == nullptr) return;
#if defined(__linux__)
  munmap(data_, bytes_);
#else
  std::free(data_);
#endif
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace sdgpu
