// Per-tensor sensitivity: how much the model's next-token distributions move (KL divergence
// against the unquantized model, runtime/kld.h) when ONE block matrix takes a candidate type and
// every other tensor stays as the source stores it. Measured on chunks of calibration text drawn
// by datasets::sample_windows (seeded; evaluation text is refused there), never on evaluation
// text. Each candidate type's tensors come from one quantize_model run per type with the
// statistics file reused (no model forward), so a tensor is quantized exactly as `bonsai
// quantize --stats` would quantize it; the per-tensor runs then swap that one tensor in.
//
// The results are cached in a JSON file keyed by what they depend on (model and statistics
// digests, calibration text digest, chunks, context, seed, top-k, method): a run with the same
// key reuses every measured entry and measures only the types missing; another key starts over.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/types.h"
#include "plot/svg.h"
#include "quantize/ternary.h"

namespace bonsai::mixed {

struct SensitivityOptions {
  std::string model, stats;
  std::vector<TypeId> types;
  std::optional<quant::Method> method;   // ternary types; default: quantize's default
  std::vector<std::string> calib_files;  // empty: quant::default_calib_files()
  int64_t chunks = 4, ctx = 256, top_k = 0;  // top_k 0: exact KLD (runtime/kld.h)
  uint64_t seed = 0;
  std::string cache;  // the JSON file (read when present, rewritten after every type)
  std::string work_dir;  // where the per-type quantized files go (removed after use)
  std::string device = "cpu";
  int threads = 0;
};

struct TensorSensitivity {
  std::string name, kind;  // kind: "attn_q", "ffn_down", ...
  int64_t block = -1;
  std::vector<int64_t> ne;
  std::map<TypeId, double> kld;       // mean KLD over the scored positions, per measured type
  std::map<TypeId, double> kld_err;   // its standard error
  std::map<TypeId, uint64_t> bytes;   // the tensor's stored size in that type
  int64_t elements() const;
};

struct SensitivityTable {
  nlohmann::ordered_json key;   // what the figures depend on (see above)
  nlohmann::ordered_json info;  // paths and settings, for the reader (not part of the key)
  std::string method;
  std::vector<TypeId> types;    // measured, in the order first measured
  std::vector<TensorSensitivity> tensors;  // the block matrices, in model order
  int64_t positions = 0;                   // scored positions per measurement
  double base_rest_mass = 0;               // mean base mass outside its top-k (the KLD bound's slack)

  const TensorSensitivity* find(const std::string& name) const;
  bool has(TypeId t) const;
};

nlohmann::ordered_json to_json(const SensitivityTable& t);
// Error naming `source` for anything malformed.
SensitivityTable sensitivity_from_json(const nlohmann::json& j, const std::string& source);
SensitivityTable read_sensitivity(const std::string& path);
void write_sensitivity(const std::string& path, const SensitivityTable& t);

// The cache key of a run: digests of the model, statistics and calibration text, and the
// measurement settings.
nlohmann::ordered_json sensitivity_key(const std::string& model_sha256, const std::string& stats_sha256,
                                       const std::string& calib_sha256, const SensitivityOptions& o,
                                       const std::string& method);
// The cached table when `path` exists and holds `key`; nullopt when absent or keyed otherwise
// (the reason goes to `why`). A file that is not a sensitivity table is an Error.
std::optional<SensitivityTable> load_cached(const std::string& path, const nlohmann::ordered_json& key,
                                            std::string* why = nullptr);

struct SensitivityEvents {
  std::function<void(const std::string&)> info;
  std::function<void(int64_t done, int64_t total)> progress;  // tensor-type measurements
};

SensitivityTable measure_sensitivity(const SensitivityOptions& o, const SensitivityEvents& ev = {});

// How alike two tables rank the tensors for type `ty` (e.g. measured on two disjoint sets of
// positions): Spearman's rank correlation of their KLDs over the tensors both hold (ties take
// their mean rank). 1: the same order. Error naming `source` when fewer than 3 tensors are shared.
double rank_agreement(const SensitivityTable& a, const SensitivityTable& b, TypeId ty, const std::string& source);

// Layers x tensor kinds, one panel per type: the KLD of each tensor taking that type alone.
plot::HeatmapFigure sensitivity_heatmap(const SensitivityTable& t, const std::vector<TypeId>& types);
// The same grid for one value per tensor (e.g. the bits/weight a plan chose), by tensor name.
plot::Heatmap tensor_grid(const std::vector<TensorSensitivity>& tensors, const std::map<std::string, double>& value,
                          const std::string& title);

// "ptq1_0,pq2_0,q4_0": Error naming `option` for an unknown or repeated type.
std::vector<TypeId> parse_type_list(const std::string& s, const std::string& option);

// "blk.3.ffn_down.weight" -> "ffn_down"; "" outside the blocks.
std::string tensor_kind(const std::string& name);

}  // namespace bonsai::mixed
