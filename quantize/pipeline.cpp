#include "quantize/pipeline.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "formats/error.h"
#include "formats/model_file.h"
#include "quantize/job.h"
#include "quantize/matrix_quant.h"

namespace bonsai::quant {

namespace fs = std::filesystem;

std::vector<std::string> default_calib_files() {
  fs::path dir = "../shared/corpora/zh";
  if (const char* e = std::getenv("BONSAI_SHARED_DIR"); e && *e) dir = fs::path(e) / "corpora/zh";
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file() && n.starts_with("calib-") && n.ends_with(".txt")) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<Model> working_model(const TensorSet& src, const ResolvedPlan& plan, const HadamardSpec* rotation,
                                     const MethodOptions& mo) {
  TensorSet work;
  work.path = src.path;
  work.format = src.format;
  work.meta = src.meta;
  for (const Tensor& t : src.tensors) {
    const TensorPlan* tp = plan.find(t.name);
    if (!tp) fail(src.path, "tensor '", t.name, "' is not in the plan");
    if (t.ne.size() < 2) {
      work.add(t);
    } else if (tp->block >= 0) {
      const std::vector<float> w = working_copy(t, rotation);
      Tensor f = t;
      f.type = TypeId::F32;
      f.nbytes = w.size() * sizeof(float);
      uint8_t* data = work.alloc(f.nbytes);
      std::copy_n(reinterpret_cast<const uint8_t*>(w.data()), f.nbytes, data);
      f.data = data;
      work.add(f);
    } else if (tp->type == t.type) {
      work.add(t);
    } else if (is_ternary(tp->type)) {
      const std::vector<float> w = working_copy(t, nullptr);
      work.add(quantize_matrix(t, w.data(), *tp, nullptr, mo, work, nullptr, {}));
    } else {
      work.add(convert_tensor(t, tp->type, work));
    }
  }
  auto m = load_model(std::move(work));
  if (rotation) {
    if (!m->hadamard.empty()) fail(src.path, "the model is already rotated (prism.hadamard.*): do not rotate it again");
    m->hadamard = *rotation;
  }
  return m;
}

QuantizeResult quantize_model(const QuantizeOptions& o, const QuantizeEvents& ev) {
  if (!o.dry_run && !o.output.ends_with(".gguf") && !o.output.ends_with(".bonsai"))
    fail(o.output, "output must end in .gguf or .bonsai");
  validate_method_options(o.method_opts);  // now, not after a calibration forward
  if (o.dry_run) return QuantizeJob(o, ev).plan_only();
  // Made before any work, so an output folder that cannot be written fails now, not hours later.
  // It is also where the job streams to: finished blocks live there until the output is written.
  JobCheckpoint ck(o.output, o.partial);
  QuantizeResult res;
  try {
    res = QuantizeJob(o, ev).run(ck);
  } catch (const Error& e) {
    if (ck.abandon())
      throw Error(cat(e.what(), "\n", ck.blocks_done(), " finished blocks are kept in ", ck.dir(),
                      ": once the cause is fixed, rerun with --resume to continue from there"));
    throw;
  } catch (...) {
    ck.abandon();
    throw;
  }
  ck.finish();
  return res;
}

}  // namespace bonsai::quant
