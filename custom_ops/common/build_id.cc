#include "common/build_id.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <cstdint>
#include <cstring>

#include "common/hash64.h"

namespace sdgpu {
namespace {

struct Search {
  const void* base = nullptr;  // load address of the object holding this code
  std::string id;
};

// Walks the PT_NOTE segments of the object loaded at search->base for NT_GNU_BUILD_ID ("GNU", type 3).
int FindNote(struct dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  if (reinterpret_cast<const void*>(info->dlpi_addr) != search->base) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
    const unsigned char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) n;
      std::memcpy(&n, p, sizeof(n));
      const size_t name_bytes = (n.n_namesz + 3) & ~size_t{3}, desc_bytes = (n.n_descsz + 3) & ~size_t{3};
      const unsigned char* name = p + sizeof(n);
      const unsigned char* desc = name + name_bytes;
      if (desc + desc_bytes > end) break;
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 && n.n_descsz > 0) {
        static const char* const kDigits = "0123456789abcdef";
        for (size_t k = 0; k < n.n_descsz; ++k) {
          search->id += kDigits[desc[k] >> 4];
          search->id += kDigits[desc[k] & 15];
        }
        return 1;
      }
      p = desc + desc_bytes;
    }
  }
  return 1;
}

std::string Compute() {
  Dl_info info{};
  Search search;
  if (dladdr(reinterpret_cast<const void*>(&Compute), &info) != 0 && info.dli_fbase != nullptr) {
    search.base = info.dli_fbase;
    dl_iterate_phdr(&FindNote, &search);
  }
  if (!search.id.empty()) return "gnu-" + search.id;
  return "built-" + Hex64(Hash64(std::string(__DATE__ " " __TIME__)));
}

}  // namespace

const std::string& BuildId() {
  static const std::string id = Compute();
  return id;
}

}  // namespace sdgpu
