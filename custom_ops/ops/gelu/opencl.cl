// SdGelu on OpenCL: 1 read + 1 write per element; the backend launches
// unary_f32 (backends/opencl/kernels/elementwise.cl) with op 12 (erf), 13 (tanh)
// or 14 (quick). This file only pins that mapping for readers of ops/gelu.
#define SD_GELU_OP_ERF 12
#define SD_GELU_OP_TANH 13
#define SD_GELU_OP_QUICK 14
