#include "delegate/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sdgpu {
namespace {

bool ParseIntIn(std::string_view text, long min, long max, int* out) {
  if (text.empty() || text.size() > 12) return false;
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0' || v < min || v > max) return false;
  *out = static_cast<int>(v);
  return true;
}

// A 0/1 flag option (weights_fp16, gemm_autotune, fuse_epilogues).
Status ParseFlag(std::string_view key, std::string_view value, bool* out) {
  if (value != "0" && value != "1") {
    return Status::Error("option " + std::string(key) + "='" + std::string(value) + "' must be 0 or 1");
  }
  *out = value == "1";
  return Status::Ok();
}

// An option whose value names one of `choices` (name -> what it sets); anything else is an error listing the names
// as "a, b or c".
template <typename T>
Status ParseChoice(std::string_view key, std::string_view value,
                   std::initializer_list<std::pair<std::string_view, T>> choices, T* out) {
  std::string names;
  size_t i = 0;
  for (const auto& [name, choice] : choices) {
    if (value == name) {
      *out = choice;
      return Status::Ok();
    }
    names += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(name);
    ++i;
  }
  return Status::Error("option " + std::string(key) + "='" + std::string(value) + "' must be " + names);
}

// profile_path: a file the delegate can create or replace, so a bad path is reported when the delegate is made, not
// as a warning after the first inference. Tried for real (access() says yes to root on a read-only file system); a
// file that did not exist is removed again.
Status CheckWritableFile(std::string_view key, const std::string& path) {
  if (path.empty()) return Status::Ok();
  struct stat st {};
  const bool existed = ::stat(path.c_str(), &st) == 0;
  if (existed && S_ISDIR(st.st_mode)) {
    return Status::Error("option " + std::string(key) + "='" + path + "' is a folder, not a file");
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::Error("option " + std::string(key) + "='" + path + "' cannot be written: " + std::strerror(errno));
  }
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
  return Status::Ok();
}

}  // namespace

bool ParseGemmTiles(const std::string& text, GemmTiles* out) {
  GemmTiles t;
  int used = 0;
  if (std::sscanf(text.c_str(), "%dx%d%n", &t.bm, &t.bn, &used) != 2 || t.bm < 1 || t.bn < 1) return false;
  const char* rest = text.c_str() + used;
  if (rest[0] == 't' && rest[1] == 'c') {
    t.tc = true;
    t.threads = 128;
    rest += 2;
  } else if (*rest == 'n') {
    int more = 0;
    if (std::sscanf(rest, "n%d%n", &t.threads, &more) != 1 || t.threads < 1) return false;
    rest += more;
  }
  if (*rest == '/') {
    int more = 0;
    // the split counts the planner has (gpu/tile_planner.cc kMaxSplits): another one would match no plan
    if (std::sscanf(rest, "/%d%n", &t.splits, &more) != 1 || t.splits < 1 || t.splits > 16 ||
        (t.splits & (t.splits - 1)) != 0) {
      return false;
    }
    rest += more;
  }
  if (*rest != '\0') return false;
  *out = t;
  return true;
}

bool ParseGlLimits(const std::string& text, GlLimits* out) {
  GlLimits l;
  for (std::string_view rest = text; !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) return false;  // trailing comma
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view limit = item.substr(0, eq);  // (not `key`: tests list the option keys by that name)
    int* field = limit == "shared_bytes"     ? &l.shared_bytes
                 : limit == "invocations"    ? &l.invocations
                 : limit == "group_size_x"   ? &l.group_size_x
                 : limit == "storage_blocks" ? &l.storage_blocks
                 : limit == "storage_block_bytes" ? &l.storage_block_bytes
                 : limit == "compute_units"  ? &l.compute_units
                 : limit == "pbuffer"        ? &l.pbuffer
                                             : nullptr;
    if (field == nullptr || !ParseIntIn(item.substr(eq + 1), 1, field == &l.pbuffer ? 1 : 1L << 30, field)) {
      return false;
    }
  }
  *out = l;
  return true;
}

bool ParseOpenClLimits(const std::string& text, OpenClLimits* out) {
  constexpr std::string_view kKey = "max_alloc_bytes=";
  if (text.compare(0, kKey.size(), kKey) != 0) return false;
  const std::string digits = text.substr(kKey.size());
  if (digits.empty() || digits.size() > 16 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  const long long n = std::stoll(digits);
  if (n < 1) return false;
  out->max_alloc_bytes = n;
  return true;
}

Status ParseDelegateOptions(const char* const* keys, const char* const* values, size_t count,
                            DelegateOptions* out) {
  *out = DelegateOptions();
  if (count > 0 && (keys == nullptr || values == nullptr)) return Status::Error("null option arrays");
  bool seen_cache_dir = false;
  auto set_cache_dir = [&](std::string_view value, bool alias) {
    if (seen_cache_dir && out->cache_dir != value) {
      return Status::Error("options cache_dir and opencl_cache_dir (its deprecated alias) name different folders ('" +
                           out->cache_dir + "', '" + std::string(value) + "'); set cache_dir only");
    }
    seen_cache_dir = true;
    out->cache_dir = std::string(value);
    out->cache_dir_from_alias = out->cache_dir_from_alias || alias;
    return Status::Ok();
  };
  for (size_t i = 0; i < count; ++i) {
    if (keys[i] == nullptr || values[i] == nullptr) return Status::Error("null option key or value");
    const std::string_view key = keys[i];
    const std::string_view value = values[i];
    if (key == "backend") {
      out->backend = std::string(value);
    } else if (key == "log_level") {
      if (!ParseLogLevel(value, &out->log_level)) {
        return Status::Error("option log_level='" + std::string(value) +
                             "' is not one of silent|error|warning|info|debug");
      }
    } else if (key == "num_threads") {
      if (value == "auto" || value == "0") {
        out->num_threads = 0;
      } else if (!ParseIntIn(value, 1, 256, &out->num_threads)) {
        return Status::Error("option num_threads='" + std::string(value) + "' must be 1..256 or 'auto'");
      }
    } else if (key == "attention_block_q") {
      if (!ParseIntIn(value, 1, 1024, &out->attention_block_q)) {
        return Status::Error("option attention_block_q='" + std::string(value) + "' must be 1..1024");
      }
    } else if (key == "attention_block_k") {
      if (!ParseIntIn(value, 1, 4096, &out->attention_block_k)) {
        return Status::Error("option attention_block_k='" + std::string(value) + "' must be 1..4096");
      }
    } else if (key == "profile_path") {
      out->profile_path = std::string(value);
      SDGPU_RETURN_IF_ERROR(CheckWritableFile(key, out->profile_path));
    } else if (key == "cache_dir") {
      SDGPU_RETURN_IF_ERROR(set_cache_dir(value, false));
    } else if (key == "opencl_cache_dir") {  // the deprecated spelling of cache_dir
      SDGPU_RETURN_IF_ERROR(set_cache_dir(value, true));
    } else if (key == "cache_max_mb") {
      if (!ParseIntIn(value, 1, 1048576, &out->cache_max_mb)) {
        return Status::Error("option cache_max_mb='" + std::string(value) + "' must be 1..1048576");
      }
    } else if (key == "cache_programs") {
      SDGPU_RETURN_IF_ERROR(ParseChoice<CachePrograms>(
          key, value, {{"auto", CachePrograms::kAuto}, {"1", CachePrograms::kAlways}, {"0", CachePrograms::kNever}},
          &out->cache_programs));
    } else if (key == "setup_progress") {
      SDGPU_RETURN_IF_ERROR(ParseFlag(key, value, &out->setup_progress));
    } else if (key == "tuning_budget_ms") {
      if (!ParseIntIn(value, 0, 3600000, &out->tuning_budget_ms)) {
        return Status::Error("option tuning_budget_ms='" + std::string(value) + "' must be 0..3600000");
      }
    } else if (key == "weights_fp16") {
      SDGPU_RETURN_IF_ERROR(ParseFlag(key, value, &out->weights_fp16));
    } else if (key == "activations_fp16") {
      SDGPU_RETURN_IF_ERROR(ParseFlag(key, value, &out->activations_fp16));
    } else if (key == "release_weight_pages") {
      SDGPU_RETURN_IF_ERROR(ParseFlag(key, value, &out->release_weight_pages));
    } else if (key == "gemm_autotune") {
      SDGPU_RETURN_IF_ERROR(ParseFlag(key, value, &out->gemm_autotune));
    } else if (key == "fuse_epilogues") {
      SDGPU_RETURN_IF_ERROR(ParseFlag(key, value, &out->fuse_epilogues));
    } else if (key == "attention_key_splits") {
      if (!ParseIntIn(value, 0, 64, &out->attention_key_splits)) {
        return Status::Error("option attention_key_splits='" + std::string(value) + "' must be 0..64 (0 = auto)");
      }
    } else if (key == "gemm_tiles") {
      GemmTiles t;
      if (!value.empty() && !ParseGemmTiles(std::string(value), &t)) {
        return Status::Error("option gemm_tiles='" + std::string(value) +
                             "' is malformed; expected BMxBN[nTHREADS|tc][/splits] with splits 1, 2, 4, 8 or 16, "
                             "e.g. 64x64n128/2");
      }
      out->gemm_tiles = std::string(value);
    } else if (key == "attention_tiling") {
      out->attention_tiling = std::string(value);  // a tiling name: CheckBackendOptions (entry/backend_factory.h)
    } else if (key == "gl_finish_each") {
      SDGPU_RETURN_IF_ERROR(ParseFlag(key, value, &out->gl_finish_each));
    } else if (key == "gl_plain_buffers") {
      SDGPU_RETURN_IF_ERROR(ParseFlag(key, value, &out->gl_plain_buffers));
    } else if (key == "gl_nv_pragmas") {
      SDGPU_RETURN_IF_ERROR(ParseFlag(key, value, &out->gl_nv_pragmas));
    } else if (key == "gl_barrier") {
      SDGPU_RETURN_IF_ERROR(
          ParseChoice<bool>(key, value, {{"all", false}, {"minimal", true}}, &out->gl_minimal_barrier));
    } else if (key == "gl_kernel_alias") {
      out->gl_kernel_alias = std::string(value);
    } else if (key == "gl_dump_dir") {
      out->gl_dump_dir = std::string(value);
    } else if (key == "gl_limits") {
      if (!ParseGlLimits(std::string(value), &out->gl_limits)) {
        return Status::Error("option gl_limits='" + std::string(value) +
                             "' is malformed; expected key=N pairs of shared_bytes, invocations, group_size_x, storage_blocks, "
                             "storage_block_bytes, compute_units (N >= 1) and pbuffer=1, e.g. "
                             "shared_bytes=16384,invocations=128");
      }
    } else if (key == "opencl_limits") {
      if (!ParseOpenClLimits(std::string(value), &out->opencl_limits)) {
        return Status::Error("option opencl_limits='" + std::string(value) +
                             "' is malformed; expected max_alloc_bytes=N (N >= 1), e.g. max_alloc_bytes=1073741824");
      }
    } else if (key == "layer_norm_fold") {
      SDGPU_RETURN_IF_ERROR(ParseChoice<LnFold>(
          key, value, {{"auto", LnFold::kAuto}, {"twin", LnFold::kTwin}, {"rows", LnFold::kRows}},
          &out->layer_norm_fold));
    } else if (key == "tensor_cores") {
      SDGPU_RETURN_IF_ERROR(ParseChoice<TensorCores>(key, value,
                                                     {{"auto", TensorCores::kAuto},
                                                      {"off", TensorCores::kOff},
                                                      {"3xtf32", TensorCores::k3xTf32},
                                                      {"fp64", TensorCores::kFp64}},
                                                     &out->tensor_cores));
    } else if (key == "weight_uploads") {
      SDGPU_RETURN_IF_ERROR(ParseChoice<WeightUploads>(
          key, value,
          {{"auto", WeightUploads::kAuto}, {"ring", WeightUploads::kRing}, {"direct", WeightUploads::kDirect}},
          &out->weight_uploads));
    } else {
      return Status::Error("unknown option '" + std::string(key) +
                           "' (known: backend, log_level, num_threads, attention_block_q, attention_block_k, "
                           "profile_path, cache_dir, cache_max_mb, opencl_cache_dir, cache_programs, tuning_budget_ms, "
                           "setup_progress, weights_fp16, activations_fp16, release_weight_pages, "
                           "gemm_autotune, fuse_epilogues, "
                           "attention_key_splits, gemm_tiles, attention_tiling, layer_norm_fold, tensor_cores, "
                           "weight_uploads, gl_finish_each, gl_barrier, "
                           "gl_plain_buffers, gl_nv_pragmas, gl_kernel_alias, gl_dump_dir, gl_limits, opencl_limits)");
    }
  }
  return Status::Ok();
}

std::string ResolvedCacheDir(const DelegateOptions& options) {
  if (options.cache_dir == "none") return "";
  if (!options.cache_dir.empty()) return options.cache_dir;
  // The XDG base-directory convention (the folder every per-user cache uses), not a setting of ours.
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') return std::string(xdg) + "/sdgpu";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') return std::string(home) + "/.cache/sdgpu";
  return "";
}

namespace {

// Whether a folder could be created at `dir` and written: it is a writable folder, or its nearest existing ancestor
// is (nothing is created here).
bool FolderWritable(std::string dir) {
  while (!dir.empty()) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode) && ::access(dir.c_str(), W_OK | X_OK) == 0;
    const size_t slash = dir.find_last_of('/');
    dir = slash == std::string::npos ? "." : dir.substr(0, slash == 0 ? 1 : slash);
  }
  return false;
}

}  // namespace

std::vector<std::string> OptionWarnings(const DelegateOptions& options) {
  std::vector<std::string> out;
  // explicit only: the default folder is tried quietly (a read-only home must not warn at every start); named by
  // the spelling the caller used
  if (!options.cache_dir.empty() && options.cache_dir != "none" && !FolderWritable(options.cache_dir)) {
    out.push_back(std::string(options.cache_dir_from_alias ? "opencl_cache_dir" : "cache_dir") + " '" +
                  options.cache_dir + "' cannot be written; the GPU backends compile their programs at every start");
  }
  return out;
}

int ResolvedNumThreads(const DelegateOptions& options) {
  if (options.num_threads > 0) return options.num_threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp<unsigned>(hw == 0 ? 1 : hw, 1, 8));
}

}  // namespace sdgpu
