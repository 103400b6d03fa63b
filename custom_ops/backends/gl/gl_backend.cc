#include "backends/gl/gl_backend.h"

#include "backends/gl/gl_device.h"
#include "gpu/gpu_backend.h"

namespace sdgpu {

Status CreateGlBackend(const DelegateOptions& options, const Logger& logger, std::unique_ptr<Backend>* out) {
  gl::GlDeviceOptions o;
  o.profiling = !options.profile_path.empty();
  o.finish_each = options.gl_finish_each;
  o.minimal_barrier = options.gl_minimal_barrier;
  o.plain_buffers = options.gl_plain_buffers;
  o.nv_pragmas = options.gl_nv_pragmas;
  o.kernel_alias = options.gl_kernel_alias;
  o.dump_dir = options.gl_dump_dir;
  o.limits = options.gl_limits;
  o.act_half = options.activations_fp16;
  std::unique_ptr<gl::GlDevice> device;
  SDGPU_RETURN_IF_ERROR(gl::GlDevice::Create(o, logger, &device));
  device->set_cache(gpu::OpenCache(options, logger));
  *out = std::make_unique<gpu::GpuBackend>(options, std::move(device), "SdGpuGL", logger);
  return Status::Ok();
}

}  // namespace sdgpu
