// The fused ops of the tiny UNet (sdconvert --random-weights tiny --fuse --winograd 4) through the delegate's C ABI,
// without Python or TFLite: each case of the op-case file (make_tiny_unet_ops.py) is built as a graph in the mini
// runtime, handed to the delegate library like benchmark_model's --external_delegate_path does, run, and its outputs
// are compared with the stored x86-64 reference. Under qemu-aarch64 this is the check that the aarch64 build computes
// what the x86-64 build does.
//
//   tiny_unet_ops_test DELEGATE.so CASES.bin [--backend cpu] [--num_threads 2] [--rtol 1e-5]
//
// Each stored sample must satisfy |a - e| <= rtol * (|e| + max|e|) (tests/native/harness.py's assert_close), and
// the sum and the sum of magnitudes over all values must agree within the sum of those bounds. Also checked: the
// delegate claims every node, in one delegate kernel per case (sdgpu_delegate_stats_json). Exit status 0 = all
// cases pass, 1 = a case failed, 2 = bad usage or unreadable input.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tests/native_cc/mini_runtime.h"
#include "tests/native_cc/op_cases.h"

namespace sdtest {
namespace {

struct Args {
  std::string library, cases;
  std::string backend = "cpu";
  std::string num_threads = "2";  // make_tiny_unet_ops.py's NUM_THREADS
  double rtol = 1e-5;
};

bool ParseArgs(int argc, char** argv, Args* args) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--backend" && has_value) args->backend = argv[++i];
    else if (a == "--num_threads" && has_value) args->num_threads = argv[++i];
    else if (a == "--rtol" && has_value) args->rtol = std::atof(argv[++i]);
    else if (a.rfind("--", 0) == 0) return false;
    else positional.push_back(a);
  }
  if (positional.size() != 2 || !(args->rtol > 0)) return false;
  args->library = positional[0];
  args->cases = positional[1];
  return true;
}

// The stats JSON's integer `key` (-1 when absent); the delegate writes flat "key":number pairs.
long StatsValue(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const size_t at = json.find(needle);
  return at == std::string::npos ? -1 : std::strtol(json.c_str() + at + needle.size(), nullptr, 10);
}

// Compares an output with its stored sample and sums; returns the worst sample error in units of the bound.
bool CheckOutput(const TensorCase& ref, const float* actual, size_t n, double rtol, double* worst, std::string* why) {
  const double max_abs = ref.max_abs;
  *worst = 0.0;
  for (size_t k = 0; k < ref.sample.size(); ++k) {
    const size_t i = static_cast<size_t>(SampleIndex(static_cast<int64_t>(k), static_cast<int64_t>(n)));
    const double e = ref.sample[k], a = actual[i];
    const double bound = rtol * (std::fabs(e) + max_abs);
    const double err = std::fabs(a - e);
    if (!(err <= bound)) {  // also catches NaN
      char buf[160];
      std::snprintf(buf, sizeof(buf), "element %zu: %.9g, expected %.9g (|diff| %.3g > %.3g)", i, a, e, err, bound);
      *why = buf;
      return false;
    }
    if (bound > 0) *worst = std::fmax(*worst, err / bound);
  }
  double sum = 0.0, abs_sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    sum += actual[i];
    abs_sum += std::fabs(actual[i]);
  }
  const double sum_bound = rtol * (ref.abs_sum + static_cast<double>(n) * max_abs);
  if (!(std::fabs(sum - ref.sum) <= sum_bound) || !(std::fabs(abs_sum - ref.abs_sum) <= sum_bound)) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "sums over all %zu values: %.9g / %.9g, expected %.9g / %.9g (bound %.3g)", n, sum,
                  abs_sum, ref.sum, ref.abs_sum, sum_bound);
    *why = buf;
    return false;
  }
  return true;
}

// Runs one case with a fresh delegate; prints one line; returns whether it passed.
bool RunCase(const Args& args, const OpCase& c) {
  auto fail = [&](const std::string& why) {
    std::printf("FAIL %-48s %s\n", c.name.c_str(), why.c_str());
    return false;
  };
  ExternalDelegate delegate;
  std::string error;
  const std::map<std::string, std::string> options = {
      {"backend", args.backend}, {"num_threads", args.num_threads}, {"log_level", "error"}};
  if (!delegate.Load(args.library, options, &error)) return fail(error);

  MiniRuntime rt;
  for (const TensorCase& t : c.tensors) {
    const int index = rt.AddTensor(t.dims, t.kind == TensorKind::kConst);
    if (t.kind == TensorKind::kInput || t.kind == TensorKind::kConst) {
      const std::vector<float> v = t.Values();
      std::memcpy(rt.data(index), v.data(), v.size() * sizeof(float));
    }
  }
  for (const NodeCase& n : c.nodes) rt.AddCustomNode(n.op, n.options, n.inputs, n.outputs);
  if (!rt.ModifyGraphWithDelegate(delegate.get())) return fail(rt.error());
  const std::string stats = delegate.StatsJson();
  if (StatsValue(stats, "claimed_nodes") != static_cast<long>(c.nodes.size()) || rt.delegate_kernels() != 1) {
    return fail("expected all " + std::to_string(c.nodes.size()) + " node(s) in one delegate kernel; stats " + stats);
  }
  if (!rt.Invoke()) return fail(rt.error());

  double worst = 0.0;
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    if (c.tensors[i].kind != TensorKind::kOutput) continue;
    double w = 0.0;
    std::string why;
    if (!CheckOutput(c.tensors[i], rt.data(static_cast<int>(i)), rt.size(static_cast<int>(i)), args.rtol, &w, &why)) {
      return fail("output " + std::to_string(i) + ": " + why);
    }
    worst = std::fmax(worst, w);
  }
  std::printf("ok   %-48s worst sample error %.2f of the bound\n", c.name.c_str(), worst);
  return true;
}

}  // namespace
}  // namespace sdtest

int main(int argc, char** argv) {
  sdtest::Args args;
  if (!sdtest::ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: %s DELEGATE.so CASES.bin [--backend cpu|opencl|gl] [--num_threads N] [--rtol R]\n",
                 argv[0]);
    return 2;
  }
  std::vector<sdtest::OpCase> cases;
  std::string error;
  if (!sdtest::ReadOpCases(args.cases, &cases, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  sdtest::ExternalDelegate probe;  // also keeps the library loaded across the cases
  {
    if (!probe.Load(args.library, {{"backend", args.backend}}, &error)) {
      std::fprintf(stderr, "%s: %s\n", args.library.c_str(), error.c_str());
      return 2;
    }
#if defined(__aarch64__)
    const char* arch = "aarch64";
#elif defined(__x86_64__)
    const char* arch = "x86-64";
#else
    const char* arch = "another architecture";
#endif
    std::printf("%s built for %s, backend %s, %zu cases, rtol %g\n", probe.Version().c_str(), arch,
                args.backend.c_str(), cases.size(), args.rtol);
  }
  int failed = 0;
  for (const sdtest::OpCase& c : cases) failed += sdtest::RunCase(args, c) ? 0 : 1;
  std::printf("%s: %d of %zu cases passed\n", failed == 0 ? "PASS" : "FAIL", static_cast<int>(cases.size()) - failed,
              cases.size());
  return failed == 0 ? 0 : 1;
}
