// The headless EGL display + OpenGL ES 3.1 context of one gl device, shared
// (std::shared_ptr) by the device and every buffer it created, so GL objects
// can be deleted in any order and the context dies with its last user.
//
// Display choice: EGL_EXT_platform_device first (NVIDIA headless:
// eglQueryDevicesEXT + eglGetPlatformDisplayEXT(EGL_PLATFORM_DEVICE_EXT);
// hardware devices before Mesa's software device), then
// EGL_MESA_platform_surfaceless, then EGL_DEFAULT_DISPLAY; the first display
// that gives an OpenGL ES >= 3.1 context wins. The context is config-less
// when EGL_KHR_no_config_context exists and used without surfaces where the
// display has EGL_KHR_surfaceless_context: compute only. Where it has not
// (the Android emulator, some older drivers), the context is made current on a
// 1x1 pbuffer surface of its config instead. Displays are never
// eglTerminate()d: an EGLDisplay is per process and may be shared with other
// delegates or with the application.
//
// Threads: all GL work happens under mutex() with the context current on the
// calling thread (GlScope). A context can be current on one thread at a time;
// see gl_device.h for which entries leave it current.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "backends/gl/gl_api.h"
#include "common/log.h"
#include "common/status.h"

namespace sdgpu::gl {

class GlContext {
 public:
  // `pbuffer`: a 1x1 pbuffer surface even where the display is surfaceless-capable (tests: gl_limits=pbuffer=1).
  static Status Create(const GlApi* api, const Logger& logger, bool pbuffer, std::shared_ptr<GlContext>* out);
  ~GlContext();
  GlContext(const GlContext&) = delete;
  GlContext& operator=(const GlContext&) = delete;

  const GlApi& api() const { return *api_; }
  std::mutex& mutex() const { return mu_; }
  // Which display was taken ("EGL device 0 (/dev/dri/renderD128)", "Mesa surfaceless", ...; ", 1x1 pbuffer" when
  // the context needs a surface).
  const std::string& display_label() const { return label_; }
  // OpenGL ES version from the context (>= 3.1).
  int gl_major() const { return major_; }
  int gl_minor() const { return minor_; }

  // Caller holds mutex(). Makes the context current on this thread, remembering the thread's previous
  // EGL binding; a no-op when it already is. EGL_BAD_ACCESS (current on another thread) is a one-line error.
  Status MakeCurrent() const;
  // Caller holds mutex(). Restores the binding MakeCurrent replaced (or none); a no-op when the context
  // is not current on this thread.
  void Restore() const;

 private:
  GlContext(const GlApi* api, const Logger& logger, bool pbuffer) : api_(api), logger_(logger), pbuffer_(pbuffer) {}
  Status Init();
  Status TryDisplay(EGLDisplay display, const std::string& label);

  const GlApi* api_;
  Logger logger_;
  std::string label_;
  EGLDisplay display_ = nullptr;
  EGLContext context_ = nullptr;
  EGLSurface surface_ = nullptr;  // the 1x1 pbuffer, where the display is not surfaceless-capable
  bool pbuffer_ = false;
  int major_ = 0, minor_ = 0;
  mutable std::mutex mu_;
  struct Binding {
    EGLDisplay display = nullptr;
    EGLSurface draw = nullptr, read = nullptr;
    EGLContext context = nullptr;
  };
  mutable Binding previous_;
};

// RAII: locks the context's mutex and makes it current on this thread; on destruction restores the
// thread's previous binding unless `keep_current` (then the context stays current, see gl_device.h).
class GlScope {
 public:
  GlScope(const GlContext& context, bool keep_current)
      : context_(context), lock_(context.mutex()), keep_current_(keep_current), status_(context.MakeCurrent()) {}
  ~GlScope() {
    if (!keep_current_ && status_.ok()) context_.Restore();
  }
  GlScope(const GlScope&) = delete;
  GlScope& operator=(const GlScope&) = delete;
  const Status& status() const { return status_; }

 private:
  const GlContext& context_;
  std::lock_guard<std::mutex> lock_;
  bool keep_current_;
  Status status_;
};

}  // namespace sdgpu::gl
