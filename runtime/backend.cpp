#include "runtime/backend.h"

#include "formats/error.h"

namespace bonsai {

std::unique_ptr<Backend> make_cpu_backend(int threads);
#ifdef BONSAI_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(int device);  // runtime/cuda/backend_cuda.cu
#endif

void Backend::matmul_shared(const Tensor* const* w, float* const* y, int count, const float* x, int64_t n) {
  for (int i = 0; i < count; ++i) matmul(*w[i], x, n, y[i]);
}

void Backend::matmul_residual(const ResidualView& r, const float*, int64_t, float*) {
  throw Error(cat("the ", name(), " backend does not support residual codebooks ('", r.base,
                  "' has them): run this file on the cpu backend"));
}

std::unique_ptr<Backend> make_backend(const std::string& device, int threads) {
  if (device == "cpu") return make_cpu_backend(threads);
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
#ifdef BONSAI_HAVE_CUDA
    int index = 0;
    if (device.size() > 5) {
      const std::string n = device.substr(5);
      if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 4)
        throw Error(cat("device '", device, "': expected cuda or cuda:N with N a device index"));
      index = std::stoi(n);
    }
    return make_cuda_backend(index);
#else
    throw Error(cat("device '", device, "': this build has no CUDA backend (configure with -DBONSAI_CUDA=ON "
                    "where the CUDA toolkit is installed)"));
#endif
  }
  throw Error(cat("unknown device '", device, "' (expected cpu or cuda[:N])"));
}

}  // namespace bonsai
