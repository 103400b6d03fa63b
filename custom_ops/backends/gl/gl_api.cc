#include "backends/gl/gl_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>

namespace sdgpu::gl {
namespace {

struct Loaded {
  GlApi api;
  Status status;
};

void* OpenFirst(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
  }
  return nullptr;
}

Loaded LoadOnce() {
  Loaded l;
  // The handles are intentionally never closed: contexts and programs may outlive any one delegate.
  void* egl = OpenFirst({"libEGL.so.1", "libEGL.so"});
  if (egl == nullptr) {
    l.status = Status::Error("gl: no EGL runtime (libEGL.so.1 not found; install libegl1 and a driver, e.g. "
                             "libegl-mesa0 + libgl1-mesa-dri)");
    return l;
  }
  void* gles = OpenFirst({"libGLESv2.so.2", "libGLESv2.so"});
  if (gles == nullptr) {
    l.status = Status::Error("gl: no OpenGL ES runtime (libGLESv2.so.2 not found; install libgles2)");
    return l;
  }
  GlApi& a = l.api;
#define SDGPU_EGL_FN(ret, name, params)                                   \
  a.name = reinterpret_cast<ret(*) params>(dlsym(egl, #name));            \
  if (a.name == nullptr) {                                                \
    l.status = Status::Error("gl: libEGL lacks the symbol " #name);       \
    return l;                                                             \
  }
#include "backends/gl/gl_functions.inc"
#define SDGPU_EGL_EXT_FN(ret, name, params) a.name = reinterpret_cast<ret(*) params>(a.eglGetProcAddress(#name));
#define SDGPU_GL_FN(ret, name, params)                                                    \
  a.name = reinterpret_cast<ret(*) params>(dlsym(gles, #name));                           \
  if (a.name == nullptr) a.name = reinterpret_cast<ret(*) params>(a.eglGetProcAddress(#name)); \
  if (a.name == nullptr) {                                                                \
    l.status = Status::Error("gl: libGLESv2 lacks the OpenGL ES 3.1 entry point " #name); \
    return l;                                                                             \
  }
#define SDGPU_GL_EXT_FN(ret, name, params) a.name = reinterpret_cast<ret(*) params>(a.eglGetProcAddress(#name));
#include "backends/gl/gl_functions.inc"
  return l;
}

std::string Hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%x", v);
  return buf;
}

}  // namespace

Status LoadGlApi(const GlApi** out) {
  static const Loaded loaded = LoadOnce();  // C++11 magic statics: thread-safe
  if (!loaded.status.ok()) return loaded.status;
  *out = &loaded.api;
  return Status::Ok();
}

std::string GlErrorName(GLenum code) {
  const char* name = "unknown GL error";
  switch (code) {
    case 0x0500: name = "GL_INVALID_ENUM"; break;
    case 0x0501: name = "GL_INVALID_VALUE"; break;
    case 0x0502: name = "GL_INVALID_OPERATION"; break;
    case 0x0505: name = "GL_OUT_OF_MEMORY"; break;
    case 0x0506: name = "GL_INVALID_FRAMEBUFFER_OPERATION"; break;
    case 0x0507: name = "GL_CONTEXT_LOST"; break;
    default: break;
  }
  return std::string(name) + " (" + Hex(code) + ")";
}

std::string EglErrorName(EGLint code) {
  static const char* const kNames[] = {
      "EGL_SUCCESS",         "EGL_NOT_INITIALIZED", "EGL_BAD_ACCESS",        "EGL_BAD_ALLOC",
      "EGL_BAD_ATTRIBUTE",   "EGL_BAD_CONFIG",      "EGL_BAD_CONTEXT",       "EGL_BAD_CURRENT_SURFACE",
      "EGL_BAD_DISPLAY",     "EGL_BAD_MATCH",       "EGL_BAD_NATIVE_PIXMAP", "EGL_BAD_NATIVE_WINDOW",
      "EGL_BAD_PARAMETER",   "EGL_BAD_SURFACE",     "EGL_CONTEXT_LOST"};
  const char* name = code >= 0x3000 && code <= 0x300E ? kNames[code - 0x3000] : "unknown EGL error";
  return std::string(name) + " (" + Hex(static_cast<unsigned>(code)) + ")";
}

Status GlCheck(const GlApi& api, const char* what) {
  GLenum first = api.glGetError();
  if (first == GL_NO_ERROR) return Status::Ok();
  // Drain the remaining flags (bounded: a lost context may report forever).
  for (int i = 0; i < 8 && api.glGetError() != GL_NO_ERROR; ++i) {
  }
  return Status::Error(std::string("gl: ") + what + " failed: " + GlErrorName(first));
}

Status EglFailure(const GlApi& api, const char* what) {
  return Status::Error(std::string("gl: ") + what + " failed: " + EglErrorName(api.eglGetError()));
}

bool HasExtension(const char* list, const char* name) {
  if (list == nullptr || name == nullptr) return false;
  const size_t n = std::strlen(name);
  for (const char* p = list; (p = std::strstr(p, name)) != nullptr; p += n) {
    const bool starts = p == list || p[-1] == ' ';
    const bool ends = p[n] == '\0' || p[n] == ' ';
    if (starts && ends) return true;
  }
  return false;
}

}  // namespace sdgpu::gl
