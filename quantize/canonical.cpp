#include "quantize/canonical.h"

#include <cstring>
#include <vector>

#include "formats/types.h"
#include "quantize/grid4.h"

namespace bonsai::quant {

int64_t first_noncanonical_block(const Tensor& t) {
  if (t.type != TypeId::PTQ1_0 && t.type != TypeId::PQ2_0) return -1;
  const TypeTraits& tt = traits(t.type);
  std::vector<float> y(size_t(t.nelements()));
  tt.to_float(t.data, y.data(), t.nelements());
  std::vector<uint8_t> again(t.nbytes);
  if (t.type == TypeId::PTQ1_0) {
    tt.from_float(y.data(), again.data(), t.nelements());
  } else {
    TernaryMatrix q;
    q.cols = t.ne[0];
    q.rows = t.nelements() / q.cols;
    q.codes.resize(y.size());
    q.scales.resize(y.size() / kGroup);
    for (size_t b = 0; b < q.scales.size(); ++b)
      q.scales[b] = reencode_grid4(y.data() + b * kGroup, kGroup, q.codes.data() + b * kGroup);
    again = q.pack(t.type);
  }
  const int64_t block = tt.block_bytes, n = int64_t(t.nbytes) / block;
  for (int64_t b = 0; b < n; ++b)
    if (std::memcmp(again.data() + b * block, t.data + b * block, size_t(block)) != 0) return b;
  return -1;
}

}  // namespace bonsai::quant
