// Runtime sanity checks of the ABI assumptions in tflite_abi.h. They run once
// per delegate Prepare, before we touch anything else, and turn a layout
// mismatch (e.g. a future runtime that changed TfLiteTensor) into a logged
// kTfLiteDelegateError instead of memory corruption.
//
// What can be probed without risking a crash:
//   * the callbacks we need are non-null;
//   * context->GetTensor(i) == &context->tensors[i] pins both the TfLiteTensor
//     stride and the TfLiteContext layout up to GetTensor;
//   * execution-plan node indices and node input/output indices are in range.
#pragma once

#include <string>

#include "abi/tflite_abi.h"

namespace sdgpu::abi {

// Returns true when the context looks like the layout we were compiled for;
// otherwise fills `why`.
bool CheckContextAbi(TfLiteContext* context, std::string* why);

}  // namespace sdgpu::abi
