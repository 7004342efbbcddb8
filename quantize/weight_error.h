// What quantizing one matrix cost: its relative output error and the facts around it. The job
// reports these, a .bonsai stores them (bonsai.quant.layer_errors), and a checkpoint keeps them
// bit for bit so that a resumed job reports exactly what an uninterrupted one would.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "formats/types.h"
#include "quantize/ternary.h"

namespace bonsai::quant {

struct WeightError {
  std::string name;
  TypeId type = TypeId::F32;
  std::optional<Method> method;
  double rel_error = 0;  // relative output error
  bool gram = false;     // measured with the Gram matrix (else importance-weighted)
  // PQ2_0 (stage 2): the stage-1 (ternary) error on the same statistics, and the share of codes
  // on the fourth level (+2, stored code 3). rel_error is the stage-2 result's, never above.
  std::optional<double> stage1_error;
  double plus2_share = 0;
  int64_t elements = 0;
  // With a residual: the error of the base alone (rel_error is then that of base + R̂), and the
  // residual's stored bytes (codebooks, indices, μ/σ).
  std::optional<double> grid_error;
  uint64_t residual_bytes = 0;
};

// A checkpoint's record: doubles as their bits, so NaN and ∞ come back exactly.
nlohmann::ordered_json checkpoint_json(const WeightError& e);
// Error naming `path` when the entry is malformed.
WeightError weight_error_from(const nlohmann::ordered_json& j, const std::string& path);

// bonsai.quant.layer_errors: every weight's error, by name (docs/formats/bonsai.md).
std::string layer_errors_json(const std::vector<WeightError>& errors);

}  // namespace bonsai::quant
