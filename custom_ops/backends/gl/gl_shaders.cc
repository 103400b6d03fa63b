#include "backends/gl/gl_shaders.h"

#include <cstring>
#include <sstream>
#include <utility>
#include <vector>

namespace sdgpu::gl {
namespace {

constexpr const char* kFileMarker = "//== file ";
constexpr const char* kKernelMarker = "//== kernel ";
constexpr const char* kFragmentMarker = "//== fragment ";
constexpr const char* kIncludeMarker = "//== include ";

bool StartsWith(const std::string& s, const char* prefix) { return s.compare(0, std::strlen(prefix), prefix) == 0; }

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

}  // namespace

Status ShaderLibrary::Parse(const char* embedded, ShaderLibrary* out) {
  ShaderLibrary lib;
  std::istringstream in(embedded == nullptr ? "" : embedded);
  std::string line;
  int line_no = 0;             // line number inside the current file
  KernelSource* current = nullptr;
  std::vector<std::pair<std::string, std::string>> includes;  // (fragment, where) to check at the end
  while (std::getline(in, line)) {
    if (StartsWith(line, kFileMarker)) {
      File f;
      f.path = Trim(line.substr(std::strlen(kFileMarker)));
      f.prelude = true;  // until a kernel marker shows up
      lib.files_.push_back(f);
      line_no = 0;
      current = nullptr;
      continue;
    }
    ++line_no;
    if (lib.files_.empty()) {
      if (Trim(line).empty()) continue;
      return Status::Error("gl: embedded shader source does not start with a file marker");
    }
    File& file = lib.files_.back();
    const bool kernel = StartsWith(line, kKernelMarker), fragment = StartsWith(line, kFragmentMarker);
    if (kernel || fragment) {
      const char* what = kernel ? "kernel" : "fragment";
      const std::string name = Trim(line.substr(std::strlen(kernel ? kKernelMarker : kFragmentMarker)));
      if (name.empty()) {
        return Status::Error("gl: " + file.path + ":" + std::to_string(line_no) + ": unnamed " + what);
      }
      auto& sections = kernel ? lib.kernels_ : lib.fragments_;
      if (sections.count(name)) return Status::Error(std::string("gl: ") + what + " '" + name + "' is defined twice");
      file.prelude = false;
      KernelSource k;
      k.name = name;
      k.file = static_cast<int>(lib.files_.size()) - 1;
      k.body_line = line_no + 1;
      current = &sections.emplace(name, std::move(k)).first->second;
      continue;
    }
    if (StartsWith(line, kIncludeMarker)) {
      const std::string name = Trim(line.substr(std::strlen(kIncludeMarker)));
      if (current == nullptr) {
        return Status::Error("gl: " + file.path + ":" + std::to_string(line_no) + ": include outside a section");
      }
      includes.emplace_back(name, file.path + ":" + std::to_string(line_no));
    }
    std::string& dst = current != nullptr ? current->body : file.common;
    dst += line;
    dst += '\n';
  }
  for (const auto& [name, where] : includes) {
    if (!lib.fragments_.count(name)) return Status::Error("gl: " + where + ": include of unknown fragment '" + name + "'");
  }
  *out = std::move(lib);
  return Status::Ok();
}

std::string ShaderLibrary::Expand(const KernelSource& section, int depth) const {
  if (depth > 8) return "#error fragment includes nested deeper than 8 (a cycle?)\n";
  std::string s;
  std::istringstream in(section.body);
  std::string line;
  int line_no = section.body_line - 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (!StartsWith(line, kIncludeMarker)) {
      s += line;
      s += '\n';
      continue;
    }
    const KernelSource& f = fragments_.at(Trim(line.substr(std::strlen(kIncludeMarker))));  // checked by Parse
    s += "#line " + std::to_string(f.body_line) + " " + std::to_string(f.file) + "\n";
    s += Expand(f, depth + 1);  // fragments may include fragments
    s += "#line " + std::to_string(line_no + 1) + " " + std::to_string(section.file) + "\n";
  }
  return s;
}

const KernelSource* ShaderLibrary::Find(const std::string& name) const {
  auto it = kernels_.find(name);
  return it == kernels_.end() ? nullptr : &it->second;
}

int ShaderLibrary::StorageBlocks(const KernelSource& kernel) const {
  std::istringstream in(files_.at(kernel.file).common + Expand(kernel));
  int n = 0;
  for (std::string line; std::getline(in, line);) n += StartsWith(Trim(line), "layout(std430") ? 1 : 0;
  return n;
}

std::string ShaderLibrary::Compose(const KernelSource& kernel, const std::array<size_t, 3>& local) const {
  std::string s = "#version 310 es\n";
  s += "layout(local_size_x = " + std::to_string(local[0]) + ", local_size_y = " + std::to_string(local[1]) +
       ", local_size_z = " + std::to_string(local[2]) + ") in;\n";
  auto part = [&](const std::string& text, int first_line, int file_no) {
    s += "#line " + std::to_string(first_line) + " " + std::to_string(file_no) + "\n";
    s += text;
  };
  // Shaders generated from the kernel dialect (*.kern) take only the preludes in front of them (the dialect's GLSL
  // runtime); the hand-written ones take every prelude.
  const bool generated = EndsWith(files_.at(kernel.file).path, ".kern");
  for (size_t i = 0; i < files_.size(); ++i) {
    if (generated && static_cast<int>(i) > kernel.file) break;
    if (files_[i].prelude) part(files_[i].common, files_[i].common_line, static_cast<int>(i));
  }
  const File& f = files_.at(kernel.file);
  part(f.common, f.common_line, kernel.file);
  part(Expand(kernel), kernel.body_line, kernel.file);
  return s;
}

}  // namespace sdgpu::gl
