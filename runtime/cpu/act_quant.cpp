#include "runtime/cpu/act_quant.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "formats/blocks.h"

namespace bonsai::cpu {
namespace {

// Position -> element maps, one per unpacking scheme of kernels_avx2.cpp (derivations there).
int identity(int p) { return p; }

// Base-3 types (TQ1_0, PTQ1_0): digit registers of 16 lanes hold elements 16r..16r+15 in order;
// packing two of them into 32 bytes interleaves their 8-lane halves, i.e. swaps bits 3 and 4 of
// the offset within each 32.
int base3_packed(int p) { return (p & ~24) | ((p & 8) << 1) | ((p & 16) >> 1); }

// 2-bit types with element j at bits 2*(j%4) of byte j/4 (PQ2_0, Q2_0): bit plane n of the
// block's B bytes is one run of B positions; position B*n + m is element 4m + n.
template <int B>
int two_bit_planes(int p) { return 4 * (p % B) + p / B; }

// Q1_0: register k holds bit 2k of the 16 bytes, then bit 2k+1: position 32k + 16h + m is
// element 8m + 2k + h.
int q1_planes(int p) { return 8 * (p % 16) + 2 * (p / 32) + (p / 16) % 2; }

constexpr ActLayout kQ8_0{QK8_0, 0, identity};
constexpr ActLayout kQ4_0{QK4_0, 8, identity};
constexpr ActLayout kQ1_0{QK1_0, 1, q1_planes};
constexpr ActLayout kQ2_0{QK2_0, 1, two_bit_planes<QK2_0 / 4>};
constexpr ActLayout kPQ2_0{QK_PQ2_0, 1, two_bit_planes<QK_PQ2_0 / 4>};
constexpr ActLayout kTQ2_0{QK_K, 1, identity};
constexpr ActLayout kTQ1_0{QK_K, 1, base3_packed};
constexpr ActLayout kPTQ1_0{QK_PTQ1_0, 1, base3_packed};
constexpr ActLayout kPTQ1_0InOrder{QK_PTQ1_0, 1, identity};
// AVX-512's Q8_0 copy holds each code plus 128 (kernels_avx512.cpp, Q8Slabs).
constexpr ActLayout kQ8_0Unsigned{QK8_0, 128, identity};

// quantize_act keeps one block of values on the stack.
static_assert(QK_K >= QK8_0 && QK_K >= QK4_0 && QK_K >= QK1_0 && QK_K >= QK2_0 && QK_K >= QK_PQ2_0 &&
              QK_K >= QK_PTQ1_0, "a layout's block is larger than quantize_act's buffer");

}  // namespace

const ActLayout* act_layout(TypeId type) {
  switch (type) {
    case TypeId::Q8_0: return &kQ8_0;
    case TypeId::Q4_0: return &kQ4_0;
    case TypeId::Q1_0: return &kQ1_0;
    case TypeId::Q2_0: return &kQ2_0;
    case TypeId::PQ2_0: return &kPQ2_0;
    case TypeId::TQ2_0: return &kTQ2_0;
    case TypeId::TQ1_0: return &kTQ1_0;
    case TypeId::PTQ1_0: return &kPTQ1_0;
    default: return nullptr;
  }
}

const ActLayout* act_layout_avx512(TypeId type) {
  if (type == TypeId::PTQ1_0) return &kPTQ1_0InOrder;
  if (type == TypeId::Q8_0) return &kQ8_0Unsigned;
  if (type == TypeId::PQ2_0) return &kPQ2_0;  // its planes are what the AVX-512 kernel reads
  return nullptr;
}

void QuantAct::reset(const ActLayout& layout, int64_t cols_, int64_t n_tokens_) {
  cols = cols_;
  n_tokens = n_tokens_;
  qk = layout.qk;
  offset = layout.offset;
  elem.resize(size_t(qk));
  for (int p = 0; p < qk; ++p) elem[size_t(p)] = layout.elem(p);
  q.resize(size_t(n_tokens * cols));
  d.resize(size_t(n_tokens * cols / qk));
  corr.resize(size_t(n_tokens * cols / qk));
}

void quantize_act(const ActLayout& layout, const float* x, int64_t cols, int64_t n_tokens, QuantAct& out) {
  out.reset(layout, cols, n_tokens);
  const int qk = out.qk;
  const int64_t nblocks = n_tokens * (cols / qk);
  float v[QK_K];  // the largest block of any layout above
  for (int64_t b = 0; b < nblocks; ++b) {
    const float* xb = x + b * qk;  // tokens are contiguous rows of cols = whole blocks
    int8_t* qb = out.q.data() + b * qk;
    float amax = 0.0f;
    bool finite = true;  // max() would drop a NaN
    for (int p = 0; p < qk; ++p) {
      v[p] = xb[out.elem[size_t(p)]];
      finite &= std::isfinite(v[p]);
      amax = std::max(amax, std::fabs(v[p]));
    }
    int sum = 0;
    float d;
    if (!finite) {
      // inf or NaN in the block: a NaN scale carries it into every output, as float math would.
      d = std::numeric_limits<float>::quiet_NaN();
      std::fill(qb, qb + qk, int8_t(0));
    } else {
      d = amax / 127.0f;
      const float id = d > 0.0f ? 1.0f / d : 0.0f;
      for (int p = 0; p < qk; ++p) {
        // The product rounded to float, then to the nearest integer, ties to even.
        const float r = std::nearbyint(v[p] * id);
        qb[p] = int8_t(std::clamp(r, -127.0f, 127.0f));
        sum += qb[p];
      }
    }
    out.d[size_t(b)] = d;
    out.corr[size_t(b)] = float(layout.offset) * (d * float(sum));  // |sum| <= 256*127: exact in float
  }
}

}  // namespace bonsai::cpu
