// The EGL and OpenGL ES 3.1 entry points the gl backend uses, resolved at
// runtime: dlopen("libEGL.so.1") and dlopen("libGLESv2.so.2") (the glvnd
// loaders on Debian; libegl1 + libgles2), extension entry points through
// eglGetProcAddress. The types and enum values below are our own
// declarations (values from the Khronos registry), so building needs no
// EGL/GLES headers, and the delegate .so still loads where no GL exists
// (asking for backend=gl there fails with a one-line error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace sdgpu::gl {

// ---- EGL types and enums ----------------------------------------------------
using EGLint = int32_t;
using EGLBoolean = unsigned int;
using EGLenum = unsigned int;
using EGLDisplay = void*;
using EGLConfig = void*;
using EGLContext = void*;
using EGLSurface = void*;
using EGLDeviceEXT = void*;

constexpr EGLBoolean EGL_TRUE = 1;
constexpr EGLint EGL_SUCCESS = 0x3000;
constexpr EGLint EGL_BAD_ACCESS = 0x3002;
constexpr EGLint EGL_NONE = 0x3038;
constexpr EGLint EGL_DONT_CARE = -1;
constexpr EGLint EGL_SURFACE_TYPE = 0x3033;
constexpr EGLint EGL_RENDERABLE_TYPE = 0x3040;
constexpr EGLint EGL_OPENGL_ES3_BIT = 0x0040;
constexpr EGLint EGL_PBUFFER_BIT = 0x0001;
constexpr EGLint EGL_HEIGHT = 0x3056;
constexpr EGLint EGL_WIDTH = 0x3057;
constexpr EGLint EGL_VENDOR = 0x3053;
constexpr EGLint EGL_VERSION = 0x3054;
constexpr EGLint EGL_EXTENSIONS = 0x3055;
constexpr EGLint EGL_DRAW = 0x3059;
constexpr EGLint EGL_READ = 0x305A;
constexpr EGLint EGL_CONTEXT_MAJOR_VERSION = 0x3098;  // == EGL_CONTEXT_CLIENT_VERSION
constexpr EGLint EGL_CONTEXT_MINOR_VERSION = 0x30FB;
constexpr EGLenum EGL_OPENGL_ES_API = 0x30A0;
constexpr EGLenum EGL_PLATFORM_DEVICE_EXT = 0x313F;
constexpr EGLenum EGL_PLATFORM_SURFACELESS_MESA = 0x31DD;
constexpr EGLint EGL_DRM_DEVICE_FILE_EXT = 0x3233;
inline EGLDisplay const EGL_NO_DISPLAY = nullptr;
inline EGLContext const EGL_NO_CONTEXT = nullptr;
inline EGLSurface const EGL_NO_SURFACE = nullptr;
inline EGLConfig const EGL_NO_CONFIG_KHR = nullptr;
inline void* const EGL_DEFAULT_DISPLAY = nullptr;

// ---- OpenGL ES types and enums ----------------------------------------------
using GLenum = unsigned int;
using GLuint = unsigned int;
using GLint = int;
using GLsizei = int;
using GLbitfield = unsigned int;
using GLboolean = unsigned char;
using GLubyte = unsigned char;
using GLchar = char;
using GLfloat = float;
using GLint64 = int64_t;
using GLuint64 = uint64_t;
using GLsync = struct __GLsync*;
using GLsizeiptr = ptrdiff_t;
using GLintptr = ptrdiff_t;

constexpr GLenum GL_NO_ERROR = 0;
constexpr GLenum GL_VENDOR = 0x1F00;
constexpr GLenum GL_RENDERER = 0x1F01;
constexpr GLenum GL_VERSION = 0x1F02;
constexpr GLenum GL_EXTENSIONS = 0x1F03;
constexpr GLenum GL_MAJOR_VERSION = 0x821B;
constexpr GLenum GL_MINOR_VERSION = 0x821C;
constexpr GLenum GL_INT = 0x1404;
constexpr GLenum GL_FLOAT = 0x1406;
constexpr GLenum GL_UNSIGNED_INT_VEC3 = 0x8DC7;
constexpr GLenum GL_COPY_READ_BUFFER = 0x8F36;
constexpr GLenum GL_COPY_WRITE_BUFFER = 0x8F37;
constexpr GLenum GL_SHADER_STORAGE_BUFFER = 0x90D2;
constexpr GLenum GL_DYNAMIC_COPY = 0x88EA;
constexpr GLbitfield GL_MAP_READ_BIT = 0x0001;
constexpr GLbitfield GL_MAP_WRITE_BIT = 0x0002;
constexpr GLbitfield GL_MAP_INVALIDATE_RANGE_BIT = 0x0004;
constexpr GLenum GL_COMPUTE_SHADER = 0x91B9;
constexpr GLenum GL_COMPILE_STATUS = 0x8B81;
constexpr GLenum GL_LINK_STATUS = 0x8B82;
constexpr GLenum GL_INFO_LOG_LENGTH = 0x8B84;
constexpr GLenum GL_PROGRAM_BINARY_LENGTH = 0x8741;
constexpr GLenum GL_NUM_PROGRAM_BINARY_FORMATS = 0x87FE;
constexpr GLenum GL_PROGRAM_BINARY_RETRIEVABLE_HINT = 0x8257;
constexpr GLenum GL_ACTIVE_UNIFORMS = 0x8B86;
constexpr GLenum GL_SHADER_STORAGE_BLOCK = 0x92E6;
constexpr GLenum GL_ACTIVE_RESOURCES = 0x92F5;
constexpr GLenum GL_BUFFER_BINDING = 0x9302;
constexpr GLbitfield GL_BUFFER_UPDATE_BARRIER_BIT = 0x00000200;
constexpr GLbitfield GL_SHADER_STORAGE_BARRIER_BIT = 0x00002000;
constexpr GLbitfield GL_ALL_BARRIER_BITS = 0xFFFFFFFF;
constexpr GLenum GL_MAX_COMPUTE_WORK_GROUP_COUNT = 0x91BE;
constexpr GLenum GL_MAX_COMPUTE_WORK_GROUP_SIZE = 0x91BF;
constexpr GLenum GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS = 0x90EB;
constexpr GLenum GL_MAX_COMPUTE_SHARED_MEMORY_SIZE = 0x8262;
constexpr GLenum GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS = 0x90DB;
constexpr GLenum GL_MAX_COMBINED_SHADER_STORAGE_BLOCKS = 0x90DC;
constexpr GLenum GL_MAX_COMBINED_SHADER_OUTPUT_RESOURCES = 0x8F39;
constexpr GLenum GL_MAX_SHADER_STORAGE_BLOCK_SIZE = 0x90DE;
constexpr GLenum GL_SHADER_STORAGE_BUFFER_OFFSET_ALIGNMENT = 0x90DF;
constexpr GLenum GL_TIME_ELAPSED_EXT = 0x88BF;
constexpr GLenum GL_SYNC_GPU_COMMANDS_COMPLETE = 0x9117;
constexpr GLbitfield GL_SYNC_FLUSH_COMMANDS_BIT = 0x1;
constexpr GLenum GL_ALREADY_SIGNALED = 0x911A;
constexpr GLenum GL_TIMEOUT_EXPIRED = 0x911B;
constexpr GLenum GL_CONDITION_SATISFIED = 0x911C;
constexpr GLenum GL_WAIT_FAILED = 0x911D;
constexpr GLenum GL_QUERY_RESULT_EXT = 0x8866;
constexpr GLenum GL_GPU_DISJOINT_EXT = 0x8FBB;

struct GlApi {
#define SDGPU_EGL_FN(ret, name, params) ret(*name) params = nullptr;
#define SDGPU_EGL_EXT_FN(ret, name, params) ret(*name) params = nullptr;
#define SDGPU_GL_FN(ret, name, params) ret(*name) params = nullptr;
#define SDGPU_GL_EXT_FN(ret, name, params) ret(*name) params = nullptr;
#include "backends/gl/gl_functions.inc"
};

// Process-wide table (loaded once, thread-safe); error if a loader library or a required symbol is missing.
Status LoadGlApi(const GlApi** out);

// "GL_INVALID_OPERATION (0x502)" / "EGL_BAD_ACCESS (0x3002)" style names.
std::string GlErrorName(GLenum code);
std::string EglErrorName(EGLint code);

// Status of the calls since the last check: "gl: <what> failed: GL_INVALID_VALUE (0x501)". Drains every
// pending error flag (GL may hold several) so the next check starts clean.
Status GlCheck(const GlApi& api, const char* what);
// Status for a failed EGL call (reads eglGetError).
Status EglFailure(const GlApi& api, const char* what);

// True when the space-separated extension list contains `name` as a whole word.
bool HasExtension(const char* list, const char* name);

}  // namespace sdgpu::gl
