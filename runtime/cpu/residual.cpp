#include "runtime/cpu/residual.h"

#include <algorithm>
#include <vector>

#include "formats/error.h"
#include "formats/fp16.h"
#include "runtime/cpu/parallel.h"
#if BONSAI_CPU_AVX2
#include "runtime/cpu/kernels_avx2.h"
#include "runtime/cpu/residual_avx2.h"
#endif

namespace bonsai::cpu {
namespace {

// Rows one thread takes at a time from a codebook's rows: whole blocks of the lookup kernel.
constexpr int64_t kRowChunk = 32;
static_assert(kRowChunk % 32 == 0, "the int8 lookup kernel takes rows 32 at a time");

// One thread's tables: a codebook's centroids transposed (ct[j·size + k], so that the table
// build's inner loop runs over centroids and vectorizes), the table, the sub-vector sums, and for
// the int8 lookup kernel the tables rounded (q, one scale a chunk). The float table has 16 floats
// of padding: the AVX2 permutes load 16 entries of the last table whatever the codebook size.
struct Scratch {
  std::vector<float> ct, lut, xsum;
#if BONSAI_CPU_AVX2
  std::vector<int8_t> q;
  std::vector<float> qscale;
#endif
  Scratch(const ResidualView& r, bool lookup)
      : ct(size_t(r.size * r.dim)), lut(size_t(r.cols / r.dim * r.size + 16)), xsum(size_t(r.cols / r.dim)) {
#if BONSAI_CPU_AVX2
    const int64_t per_row = r.cols / r.dim;
    if (lookup) {
      q.resize(size_t((per_row + 1) / 2 * 32));
      qscale.resize(size_t((per_row + avx2::kLookupChunk - 1) / avx2::kLookupChunk));
    }
#else
    (void)lookup;
#endif
  }
};

void load_book(const ResidualView& r, int64_t b, Scratch& s) {
  const uint16_t* book = r.codebook + b * r.size * r.dim;
  for (int64_t k = 0; k < r.size; ++k)
    for (int64_t j = 0; j < r.dim; ++j) s.ct[size_t(j * r.size + k)] = fp16_to_f32(book[k * r.dim + j]);
}

// lut[p][k] = centroid k · sub-vector p of xt (p-major: a row's gathers stay in one stripe).
void build_lut(const ResidualView& r, const float* xt, Scratch& s, bool simd) {
  const int64_t per_row = r.cols / r.dim;
#if BONSAI_CPU_AVX2
  if (simd) {
    avx2::residual_lut(s.ct.data(), r.size, r.dim, xt, per_row, s.lut.data(), s.xsum.data());
    if (!s.q.empty()) avx2::residual_lut_i8(s.lut.data(), r.size, per_row, s.q.data(), s.qscale.data());
    return;
  }
#else
  (void)simd;
#endif
  for (int64_t p = 0; p < per_row; ++p) {
    const float* xp = xt + p * r.dim;
    float* out = s.lut.data() + p * r.size;
    float sum = 0.0f;
    std::fill(out, out + r.size, 0.0f);
    for (int64_t j = 0; j < r.dim; ++j) {
      const float xj = xp[j];
      const float* c = s.ct.data() + j * r.size;
      for (int64_t k = 0; k < r.size; ++k) out[k] += c[k] * xj;
      sum += xj;
    }
    s.xsum[size_t(p)] = sum;
  }
}

// yt[row] += row's gather-add for rows [r0, r1) of the codebook whose table is in s. With
// `packed` (the int8 tables built), r0 and r1 are multiples of 32 (pack_residual_indices' rule).
void gather(const ResidualView& r, const Scratch& s, int64_t r0, int64_t r1, float* yt, bool simd,
            const uint8_t* packed) {
  const int64_t per_row = r.cols / r.dim;
  const float* lut = s.lut.data();
#if BONSAI_CPU_AVX2
  if (packed) {
    const uint64_t block_bytes = uint64_t((per_row + 1) / 2 * 32);
    avx2::residual_lookup32(s.q.data(), s.qscale.data(), per_row, packed + uint64_t(r0 / 32) * block_bytes,
                            (r1 - r0) / 32, yt + r0);
    return;
  }
  if (simd && r.scheme == ResidualScheme::kmeans &&
      avx2::residual_gather(lut, r.size, r.bits, per_row, r.indices + uint64_t(r0) * r.row_bytes, r.row_bytes,
                            r1 - r0, yt + r0))
    return;
#else
  (void)simd;
  (void)packed;
#endif
  for (int64_t row = r0; row < r1; ++row) {
    const uint8_t* idx = r.indices + uint64_t(row) * r.row_bytes;
    float sum = 0.0f;
    if (r.scheme == ResidualScheme::pattern) {
      const uint16_t* ms = r.params + row * per_row * 2;
      for (int64_t p = 0; p < per_row; ++p)
        sum += fp16_to_f32(ms[2 * p]) * s.xsum[size_t(p)] +
               fp16_to_f32(ms[2 * p + 1]) * lut[p * r.size + index_at(idx, p, r.bits)];
    } else if (r.bits == 8) {  // the byte-wide and nibble-wide indices: no bit-by-bit extraction
      for (int64_t p = 0; p < per_row; ++p) sum += lut[p * r.size + idx[p]];
    } else if (r.bits == 4) {
      for (int64_t p = 0; p < per_row; ++p) sum += lut[p * r.size + ((idx[p >> 1] >> ((p & 1) * 4)) & 15)];
    } else {
      for (int64_t p = 0; p < per_row; ++p) sum += lut[p * r.size + index_at(idx, p, r.bits)];
    }
    yt[row] += sum;
  }
}

void run(const ResidualView& r, const float* x, int64_t n, float* y, bool simd, const uint8_t* packed) {
  const int64_t g = r.rows_per_book(), per_row = r.cols / r.dim;
  const bool lookup = simd && packed;
  const bool parallel = r.rows * per_row * n >= kParallelWork;
  const int nth = parallel ? team::size() : 1;
  if (r.books >= nth) {
    // Enough codebooks for every thread: each builds the tables of its own codebooks (the table
    // build, size·cols multiply-adds per codebook and token, is then parallel too).
    auto books = [&](int thread, int threads) {
      Scratch s(r, lookup);
      for (auto [b, end] = team::part(r.books, thread, threads); b < end; ++b) {
        load_book(r, b, s);
        for (int64_t t = 0; t < n; ++t) {
          build_lut(r, x + t * r.cols, s, simd);
          gather(r, s, b * g, (b + 1) * g, y + t * r.rows, simd, lookup ? packed : nullptr);
        }
      }
    };
    if (nth > 1) team::run(books);
    else books(0, 1);
    return;
  }
  // Fewer codebooks than threads: one table at a time, its rows shared out in chunks.
  Scratch s(r, lookup);
  for (int64_t b = 0; b < r.books; ++b) {
    load_book(r, b, s);
    for (int64_t t = 0; t < n; ++t) {
      build_lut(r, x + t * r.cols, s, simd);
      float* yt = y + t * r.rows;
      const int64_t chunks = (g + kRowChunk - 1) / kRowChunk;
      parallel_for(chunks, nth > 1, [&](int64_t c) {
        gather(r, s, b * g + c * kRowChunk, b * g + std::min(g, (c + 1) * kRowChunk), yt, simd,
               lookup ? packed : nullptr);
      });
    }
  }
}

}  // namespace

std::vector<uint8_t> pack_residual_indices(const ResidualView& r) {
#if BONSAI_CPU_AVX2
  if (!avx2_usable() || r.scheme != ResidualScheme::kmeans || r.bits != 4 || r.rows_per_book() % 32 != 0) return {};
  const uint64_t pairs = uint64_t(r.cols / r.dim + 1) / 2;  // = row_bytes for 4-bit indices
  std::vector<uint8_t> out(size_t(uint64_t(r.rows) * pairs));
  for (int64_t b = 0; b < r.rows / 32; ++b)
    for (uint64_t k = 0; k < pairs; ++k)
      for (int64_t j = 0; j < 32; ++j)
        out[size_t((uint64_t(b) * pairs + k) * 32 + uint64_t(j))] = r.indices[uint64_t(32 * b + j) * r.row_bytes + k];
  return out;
#else
  (void)r;
  return {};
#endif
}

void residual_matmul(const ResidualView& r, const float* x, int64_t n, float* y, const std::vector<uint8_t>* packed) {
#if BONSAI_CPU_AVX2
  const bool simd = avx2_usable();
#else
  const bool simd = false;
#endif
  if (packed && !packed->empty() && packed->size() != size_t(uint64_t(r.rows) * uint64_t((r.cols / r.dim + 1) / 2)))
    throw Error(cat(r.base, ": residual_matmul: regrouped indices of ", packed->size(), " bytes do not belong to this view"));
  run(r, x, n, y, simd, packed && !packed->empty() ? packed->data() : nullptr);
}

void residual_matmul_scalar(const ResidualView& r, const float* x, int64_t n, float* y) {
  run(r, x, n, y, false, nullptr);
}

void residual_matmul_ref(const ResidualView& r, const float* x, int64_t n, float* y) {
  const std::vector<float> rh = r.dequantize();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t row = 0; row < r.rows; ++row) {
      double s = 0.0;
      for (int64_t k = 0; k < r.cols; ++k) s += double(rh[size_t(row * r.cols + k)]) * double(x[t * r.cols + k]);
      y[t * r.rows + row] += float(s);
    }
}

}  // namespace bonsai::cpu
