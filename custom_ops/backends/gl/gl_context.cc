#include "backends/gl/gl_context.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace sdgpu::gl {

Status GlContext::Create(const GlApi* api, const Logger& logger, bool pbuffer, std::shared_ptr<GlContext>* out) {
  std::shared_ptr<GlContext> c(new GlContext(api, logger, pbuffer));
  SDGPU_RETURN_IF_ERROR(c->Init());
  *out = std::move(c);
  return Status::Ok();
}

GlContext::~GlContext() {
  if (context_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  Restore();
  // Deletes every GL object of the context (buffers, programs, queries); deferred by EGL while the
  // context is still current on some other thread.
  api_->eglDestroyContext(display_, context_);
  if (surface_ != nullptr) api_->eglDestroySurface(display_, surface_);
}

Status GlContext::Init() {
  const GlApi& a = *api_;
  // Client extensions (EGL 1.5 / EGL_EXT_client_extensions); NULL + EGL_BAD_DISPLAY without them.
  const char* client = a.eglQueryString(EGL_NO_DISPLAY, EGL_EXTENSIONS);
  if (client == nullptr) a.eglGetError();  // clear the flag
  struct Candidate {
    EGLDisplay display;
    std::string label;
  };
  std::vector<Candidate> candidates;
  const EGLint no_attribs[] = {EGL_NONE};
  if (HasExtension(client, "EGL_EXT_platform_device") && a.eglQueryDevicesEXT != nullptr &&
      a.eglGetPlatformDisplayEXT != nullptr) {
    EGLDeviceEXT devices[16] = {};
    EGLint n = 0;
    if (a.eglQueryDevicesEXT(16, devices, &n) == EGL_TRUE) {
      std::vector<std::pair<bool, int>> order;  // (software, index): hardware devices first
      for (int i = 0; i < n; ++i) {
        const char* ext = a.eglQueryDeviceStringEXT ? a.eglQueryDeviceStringEXT(devices[i], EGL_EXTENSIONS) : nullptr;
        order.emplace_back(HasExtension(ext, "EGL_MESA_device_software"), i);
      }
      std::stable_sort(order.begin(), order.end());
      for (const auto& [software, i] : order) {
        std::string label = "EGL device " + std::to_string(i);
        const char* ext = a.eglQueryDeviceStringEXT ? a.eglQueryDeviceStringEXT(devices[i], EGL_EXTENSIONS) : nullptr;
        const char* drm = HasExtension(ext, "EGL_EXT_device_drm") && a.eglQueryDeviceStringEXT
                              ? a.eglQueryDeviceStringEXT(devices[i], EGL_DRM_DEVICE_FILE_EXT)
                              : nullptr;
        if (software) label += " (software)";
        else if (drm != nullptr) label += std::string(" (") + drm + ")";
        candidates.push_back({a.eglGetPlatformDisplayEXT(EGL_PLATFORM_DEVICE_EXT, devices[i], no_attribs), label});
      }
    } else {
      a.eglGetError();
    }
  }
  if (HasExtension(client, "EGL_MESA_platform_surfaceless") && a.eglGetPlatformDisplayEXT != nullptr) {
    candidates.push_back(
        {a.eglGetPlatformDisplayEXT(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, no_attribs), "Mesa surfaceless"});
  }
  candidates.push_back({a.eglGetDisplay(EGL_DEFAULT_DISPLAY), "EGL_DEFAULT_DISPLAY"});

  std::string reasons;
  for (const Candidate& c : candidates) {
    Status s = c.display == EGL_NO_DISPLAY ? Status::Error("no display") : TryDisplay(c.display, c.label);
    if (s.ok()) {
      label_ = c.label + (surface_ != nullptr ? ", 1x1 pbuffer" : "");
      return Status::Ok();
    }
    if (c.display == EGL_NO_DISPLAY) a.eglGetError();
    reasons += (reasons.empty() ? "" : "; ") + c.label + ": " + s.message();
  }
  return Status::Error("gl: no EGL display with an OpenGL ES 3.1 context (" + reasons +
                       "); install libegl1 libgles2 and a driver (NVIDIA, or Mesa: libegl-mesa0 libgl1-mesa-dri)");
}

Status GlContext::TryDisplay(EGLDisplay display, const std::string& label) {
  const GlApi& a = *api_;
  EGLint egl_major = 0, egl_minor = 0;
  if (a.eglInitialize(display, &egl_major, &egl_minor) != EGL_TRUE) return EglFailure(a, "eglInitialize");
  const char* ext = a.eglQueryString(display, EGL_EXTENSIONS);
  // Without surfaceless contexts the context needs a surface to be current on: a 1x1 pbuffer (never drawn to).
  const bool pbuffer = pbuffer_ || !HasExtension(ext, "EGL_KHR_surfaceless_context");
  if (a.eglBindAPI(EGL_OPENGL_ES_API) != EGL_TRUE) return EglFailure(a, "eglBindAPI(EGL_OPENGL_ES_API)");
  EGLConfig config = EGL_NO_CONFIG_KHR;
  if (pbuffer || !HasExtension(ext, "EGL_KHR_no_config_context")) {
    const EGLint attribs[] = {EGL_RENDERABLE_TYPE, EGL_OPENGL_ES3_BIT, EGL_SURFACE_TYPE,
                              pbuffer ? EGL_PBUFFER_BIT : EGL_DONT_CARE, EGL_NONE};
    EGLint n = 0;
    if (a.eglChooseConfig(display, attribs, &config, 1, &n) != EGL_TRUE) return EglFailure(a, "eglChooseConfig");
    if (n < 1) {
      return Status::Error(pbuffer ? "no EGL_KHR_surfaceless_context and no EGL config with EGL_OPENGL_ES3_BIT and "
                                     "EGL_PBUFFER_BIT"
                                   : "no EGL config with EGL_OPENGL_ES3_BIT");
    }
  }
  // ES 3.1 explicitly (EGL 1.5 / EGL_KHR_create_context); plain "ES 3" on older EGLs, then the version check.
  const EGLint es31[] = {EGL_CONTEXT_MAJOR_VERSION, 3, EGL_CONTEXT_MINOR_VERSION, 1, EGL_NONE};
  const EGLint es3[] = {EGL_CONTEXT_MAJOR_VERSION, 3, EGL_NONE};
  EGLContext ctx = a.eglCreateContext(display, config, EGL_NO_CONTEXT, es31);
  if (ctx == EGL_NO_CONTEXT) {
    a.eglGetError();
    ctx = a.eglCreateContext(display, config, EGL_NO_CONTEXT, es3);
  }
  if (ctx == EGL_NO_CONTEXT) return EglFailure(a, "eglCreateContext(OpenGL ES 3.1)");
  EGLSurface surface = EGL_NO_SURFACE;
  if (pbuffer) {
    const EGLint size[] = {EGL_WIDTH, 1, EGL_HEIGHT, 1, EGL_NONE};
    surface = a.eglCreatePbufferSurface(display, config, size);
    if (surface == EGL_NO_SURFACE) {
      const Status s = EglFailure(a, "eglCreatePbufferSurface (no EGL_KHR_surfaceless_context)");
      a.eglDestroyContext(display, ctx);
      return s;
    }
  }
  display_ = display;
  context_ = ctx;
  surface_ = surface;
  std::lock_guard<std::mutex> lock(mu_);
  Status s = MakeCurrent();
  if (s.ok()) {
    GLint major = 0, minor = 0;
    a.glGetIntegerv(GL_MAJOR_VERSION, &major);
    a.glGetIntegerv(GL_MINOR_VERSION, &minor);
    s = GlCheck(a, "glGetIntegerv(GL_MAJOR_VERSION)");
    const char* version = reinterpret_cast<const char*>(a.glGetString(GL_VERSION));
    if (s.ok() && (major < 3 || (major == 3 && minor < 1))) {
      s = Status::Error(std::string("context is ") + (version ? version : "?") + ", compute shaders need ES 3.1");
    }
    major_ = major;
    minor_ = minor;
    Restore();
  }
  if (!s.ok()) {
    a.eglDestroyContext(display, ctx);
    if (surface != EGL_NO_SURFACE) a.eglDestroySurface(display, surface);
    display_ = nullptr;
    context_ = nullptr;
    surface_ = nullptr;
  }
  return s;
}

Status GlContext::MakeCurrent() const {
  const GlApi& a = *api_;
  if (a.eglGetCurrentContext() == context_) return Status::Ok();
  previous_.display = a.eglGetCurrentDisplay();
  previous_.draw = a.eglGetCurrentSurface(EGL_DRAW);
  previous_.read = a.eglGetCurrentSurface(EGL_READ);
  previous_.context = a.eglGetCurrentContext();
  if (a.eglMakeCurrent(display_, surface_, surface_, context_) != EGL_TRUE) {
    const EGLint e = a.eglGetError();
    previous_ = Binding();
    if (e == EGL_BAD_ACCESS) {
      return Status::Error("gl: the GL context is current on another thread (launches there were not followed by "
                           "a blocking read); use one delegate from one thread at a time");
    }
    return Status::Error("gl: eglMakeCurrent failed: " + EglErrorName(e));
  }
  return Status::Ok();
}

void GlContext::Restore() const {
  const GlApi& a = *api_;
  if (context_ == nullptr || a.eglGetCurrentContext() != context_) return;
  const Binding p = std::exchange(previous_, Binding());
  EGLBoolean ok = EGL_TRUE;
  if (p.context != EGL_NO_CONTEXT && p.display != EGL_NO_DISPLAY) {
    ok = a.eglMakeCurrent(p.display, p.draw, p.read, p.context);
  }
  // Fall back to releasing ours when the previous binding cannot be restored (e.g. destroyed meanwhile).
  if (ok != EGL_TRUE || p.context == EGL_NO_CONTEXT || p.display == EGL_NO_DISPLAY) {
    if (ok != EGL_TRUE) logger_.Warning("gl: could not restore the thread's previous EGL context: " +
                                        EglErrorName(a.eglGetError()));
    if (a.eglMakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT) != EGL_TRUE) {
      logger_.Warning("gl: eglMakeCurrent(EGL_NO_CONTEXT) failed: " + EglErrorName(a.eglGetError()));
    }
  }
}

}  // namespace sdgpu::gl
