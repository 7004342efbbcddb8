// Size accounting of a tensor set: parameters, bytes and bits/weight per type and overall — what
// `inspect` prints and what quantization plans are measured by.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "formats/tensor_set.h"

namespace bonsai {

struct SizeTotals {
  int64_t tensors = 0;
  int64_t params = 0;
  uint64_t bytes = 0;
  double bits_per_weight() const { return params ? 8.0 * double(bytes) / double(params) : 0.0; }
};

struct SizeSummary {
  SizeTotals all;
  std::map<std::string, SizeTotals> by_type;  // type name -> totals
};

SizeSummary summarize(const TensorSet& ts);

}  // namespace bonsai
