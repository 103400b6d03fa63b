// Giving back the host pages of model weights once the device holds what was made from them.
//
// LiteRT maps a model file read-only and shared (MMAPAllocation): every weight page the delegate reads while it
// packs and uploads stays in the process's resident set until the interpreter is destroyed -- SD1.5's fp32 UNet
// file alone is 3.4 GB of RSS on a phone whose app gets a few GB. Dropping this process's page-table entries of a
// read-only shared file mapping (madvise MADV_DONTNEED) is invisible to every reader: the next access faults the
// same bytes back in from the page cache or the file. Anything else (heap copies from model_content, private
// mappings, which may hold written copy-on-write pages) is left alone: there the call would destroy data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sdgpu {

class FileMappedPages {
 public:
  // The process's read-only shared file mappings now (/proc/self/maps; none where it cannot be read or on
  // systems without it, which makes Release a no-op).
  static FileMappedPages Snapshot();

  // Drops the resident whole pages inside [p, p + bytes) when the range lies in one of those mappings, and
  // remembers the range. Returns the bytes given back (0: not such a mapping, or smaller than a page).
  size_t Release(const void* p, size_t bytes);
  // Drops every range released so far once more. A later read next to a released range can map it again without
  // touching it: the kernel maps a fault's neighbours that the page cache holds (fault-around, 64 KiB) or the whole
  // large folio (up to 2 MiB as one PMD) -- measured on the CI host, where reading the next weight brought back
  // what releasing the previous one had dropped.
  void ReleaseAgain() const;

  bool empty() const { return ranges_.empty(); }

 private:
  struct Range {
    uintptr_t begin, end;
  };
  std::vector<Range> ranges_;    // the mappings, sorted by begin, disjoint
  std::vector<Range> released_;  // page-aligned ranges given back
};

// Host memory taken straight from the system (an anonymous mapping where there is one): pages never written cost no
// RSS, and reset() returns every page at once (a freed malloc block of a few MB can stay in the allocator's heap).
class AnonymousBuffer {
 public:
  AnonymousBuffer() = default;
  explicit AnonymousBuffer(size_t bytes);  // data() is nullptr when the system refuses
  ~AnonymousBuffer() { reset(); }
  AnonymousBuffer(const AnonymousBuffer&) = delete;
  AnonymousBuffer& operator=(const AnonymousBuffer&) = delete;
  AnonymousBuffer(AnonymousBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) {
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  AnonymousBuffer& operator=(AnonymousBuffer&& o) noexcept;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  void reset();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace sdgpu
