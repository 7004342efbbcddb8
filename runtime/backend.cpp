#include "runtime/backend.h"

#include "formats/error.h"

namespace bonsai {

std::unique_ptr<Backend> make_cpu_backend(int threads);

std::unique_ptr<Backend> make_backend(const std::string& device, int threads) {
  if (device == "cpu") return make_cpu_backend(threads);
  if (device.rfind("cuda", 0) == 0)
    throw Error(cat("device '", device, "': this build has no CUDA backend yet (use --device cpu)"));
  throw Error(cat("unknown device '", device, "' (expected cpu or cuda[:N])"));
}

}  // namespace bonsai
