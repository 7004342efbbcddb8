// The residual product's lookup-table path against the expanded R̂ (formats' decoder), for both
// schemes, several index widths (byte-wide and bit-packed), several codebooks, several tokens:
// the dispatched path (AVX2 gather-add where the CPU has it) and the scalar one alike.
#include "runtime/cpu/residual.h"

#include "runtime/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "formats/error.h"
#include "formats/fp16.h"

using namespace bonsai;

namespace {

struct Stored {
  std::vector<uint16_t> book, params;
  std::vector<uint8_t> index;
  ResidualView v;
};

Stored make(int64_t cols, int64_t rows, int64_t dim, int64_t size, int64_t books, bool pattern, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  Stored s;
  s.book.resize(size_t(dim * size * books));
  for (auto& h : s.book) h = f32_to_fp16(nd(rng));
  ResidualView& v = s.v;
  v.scheme = pattern ? ResidualScheme::pattern : ResidualScheme::kmeans;
  v.base.assign(1, 'w');  // not = "w": GCC 12 -O3 warns a false -Wrestrict on that assignment
  v.rows = rows;
  v.cols = cols;
  v.dim = dim;
  v.size = size;
  v.books = books;
  v.bits = index_bits(size);
  const int64_t per_row = cols / dim;
  v.row_bytes = index_row_bytes(per_row, v.bits);
  s.index.resize(size_t(v.row_bytes * uint64_t(rows)));
  std::vector<uint32_t> idx(static_cast<size_t>(per_row));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& i : idx) i = uint32_t(rng() % uint64_t(size));
    pack_indices(idx.data(), per_row, v.bits, s.index.data() + uint64_t(r) * v.row_bytes);
  }
  if (pattern) {
    s.params.resize(size_t(rows * per_row * 2));
    for (auto& h : s.params) h = f32_to_fp16(nd(rng));
  }
  v.codebook = s.book.data();
  v.indices = s.index.data();
  v.params = pattern ? s.params.data() : nullptr;
  return s;
}

}  // namespace

TEST(CpuResidual, LookupTableMatchesTheExpandedResidual) {
  struct Case { int64_t cols, rows, dim, size, books; bool pattern; };
  const Case cases[] = {{256, 12, 8, 16, 1, false},  {256, 12, 8, 256, 3, false}, {384, 10, 4, 12, 2, false},
                        {512, 8, 128, 4, 1, true},   {256, 6, 32, 1024, 6, false}, {128, 300, 16, 256, 1, false},
                        {256, 5, 1, 2, 5, false},  {2048, 64, 8, 16, 1, false}, {2048, 64, 8, 16, 16, false},
                        {1024, 40, 4, 256, 2, false}, {512, 9, 8, 4, 3, false}, {384, 10, 32, 16, 2, false},
                        {1024, 33, 128, 4, 1, true}, {512, 16, 8, 4, 1, false},   {256, 24, 2, 2, 1, false},
                        {384, 16, 32, 16, 1, false}, {1024, 27, 8, 12, 1, false}};
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& c : cases) {
    const Stored s = make(c.cols, c.rows, c.dim, c.size, c.books, c.pattern, uint32_t(c.cols + c.size));
    for (int64_t n : {1, 3}) {
      std::vector<float> x(size_t(n * c.cols));
      for (auto& v : x) v = nd(rng);
      std::vector<float> y(size_t(n * c.rows)), scalar(y.size()), ref(y.size());
      for (size_t i = 0; i < y.size(); ++i) y[i] = scalar[i] = ref[i] = float(i % 7);  // accumulates onto y
      cpu::residual_matmul(s.v, x.data(), n, y.data());
      cpu::residual_matmul_scalar(s.v, x.data(), n, scalar.data());
      cpu::residual_matmul_ref(s.v, x.data(), n, ref.data());
      double scale = 0.0;
      for (size_t i = 0; i < ref.size(); ++i) scale = std::max(scale, std::fabs(double(ref[i]) - double(i % 7)));
      // Float sums in another order than the double reference: 1e-5 of the largest output (the
      // gather-add's lanes add in yet another order, within the same bound).
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], ref[i], 1e-5 * (1.0 + scale))
            << "cols " << c.cols << " dim " << c.dim << " size " << c.size << " books " << c.books << " n " << n
            << " at " << i;
        ASSERT_NEAR(scalar[i], ref[i], 1e-5 * (1.0 + scale))
            << "scalar: cols " << c.cols << " dim " << c.dim << " size " << c.size << " books " << c.books << " n "
            << n << " at " << i;
      }
    }
  }
}

// The check can fail: changing one index moves exactly its row's output, by the difference of
// the two centroids' products.
TEST(CpuResidual, OneIndexMovesOneRow) {
  Stored s = make(256, 4, 8, 16, 1, false, 9);
  std::vector<float> x(256, 0.0f);
  for (int k = 0; k < 8; ++k) x[size_t(40 + k)] = 1.0f;  // sub-vector 5 only
  std::vector<float> y0(4, 0.0f), y1(4, 0.0f);
  cpu::residual_matmul(s.v, x.data(), 1, y0.data());
  const uint32_t old_i = s.v.index(2, 5), new_i = (old_i + 1) % 16;
  std::vector<uint32_t> idx(32);
  for (int p = 0; p < 32; ++p) idx[size_t(p)] = s.v.index(2, p);
  idx[5] = new_i;
  pack_indices(idx.data(), 32, 4, s.index.data() + 2 * s.v.row_bytes);
  cpu::residual_matmul(s.v, x.data(), 1, y1.data());
  float want = 0.0f;
  for (int k = 0; k < 8; ++k) want += fp16_to_f32(s.book[size_t(new_i * 8 + k)]) - fp16_to_f32(s.book[size_t(old_i * 8 + k)]);
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(y1[size_t(r)] - y0[size_t(r)], r == 2 ? want : 0.0f, 1e-6) << r;
}

// The int8 lookup kernel (4-bit indices regrouped by pack_residual_indices): within the bound
// residual.h states, (sub-vectors per row) × (largest table entry) / 254, of the expanded
// residual; odd sub-vector counts, several 128-table chunks, several codebooks, several tokens.
TEST(CpuResidual, Int8LookupKernelIsWithinItsBound) {
  struct Case { int64_t cols, rows, dim, size, books; };
  const Case cases[] = {{2048, 64, 8, 16, 1}, {2048, 64, 8, 16, 2}, {256, 96, 8, 12, 3},
                        {384, 32, 128, 16, 1}, {4096, 32, 8, 16, 1}, {16512, 32, 128, 16, 1}, {1024, 64, 4, 9, 1}};
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& c : cases) {
    const Stored s = make(c.cols, c.rows, c.dim, c.size, c.books, false, uint32_t(c.cols + c.rows));
    const std::vector<uint8_t> packed = cpu::pack_residual_indices(s.v);
    if (cpu::matmul_path_taken() < cpu::MatmulPath::avx2) {
      EXPECT_TRUE(packed.empty());
      continue;
    }
    ASSERT_EQ(packed.size(), size_t(uint64_t(c.rows) * s.v.row_bytes)) << "cols " << c.cols;
    const int64_t per_row = c.cols / c.dim, g = c.rows / c.books;
    for (int64_t n : {1, 2}) {
      std::vector<float> x(size_t(n * c.cols));
      for (auto& v : x) v = nd(rng);
      std::vector<float> y(size_t(n * c.rows), 1.0f), ref(y.size(), 1.0f);
      cpu::residual_matmul(s.v, x.data(), n, y.data(), &packed);
      cpu::residual_matmul_ref(s.v, x.data(), n, ref.data());
      for (int64_t t = 0; t < n; ++t)
        for (int64_t b = 0; b < c.books; ++b) {
          double entry = 0.0;  // the largest |centroid k · sub-vector p| of this codebook and token
          for (int64_t p = 0; p < per_row; ++p)
            for (int64_t k = 0; k < c.size; ++k) {
              double d = 0.0;
              for (int64_t j = 0; j < c.dim; ++j)
                d += double(fp16_to_f32(s.book[size_t((b * c.size + k) * c.dim + j)])) * x[size_t(t * c.cols + p * c.dim + j)];
              entry = std::max(entry, std::fabs(d));
            }
          const double bound = double(per_row) * entry / 254.0 * (1 + 1e-3) + 1e-5 * (1 + entry * double(per_row));
          for (int64_t r = b * g; r < (b + 1) * g; ++r) {
            const size_t i = size_t(t * c.rows + r);
            ASSERT_NEAR(y[i], ref[i], bound) << "cols " << c.cols << " size " << c.size << " books " << c.books << " row " << r;
          }
        }
      // and not merely within a loose bound: the rounding is a small part of it on random data
      double err = 0.0, mag = 0.0;
      for (size_t i = 0; i < y.size(); ++i) err += std::fabs(double(y[i]) - ref[i]), mag += std::fabs(double(ref[i]) - 1.0);
      EXPECT_LT(err, 0.02 * mag) << "cols " << c.cols;
    }
  }
}

TEST(CpuResidual, LookupLayoutOnlyWhereTheKernelApplies) {
  EXPECT_TRUE(cpu::pack_residual_indices(make(256, 12, 8, 256, 3, false, 1).v).empty());  // 8-bit indices
  EXPECT_TRUE(cpu::pack_residual_indices(make(256, 48, 8, 16, 1, false, 1).v).empty());  // 48 rows a codebook
  EXPECT_TRUE(cpu::pack_residual_indices(make(512, 32, 128, 4, 1, true, 1).v).empty());  // pattern
}

// Regrouped indices of another view are refused, naming the weight, rather than read past.
TEST(CpuResidual, RegroupedIndicesOfAnotherViewAreRefused) {
  const Stored a = make(2048, 64, 8, 16, 1, false, 2), b = make(1024, 64, 8, 16, 1, false, 2);
  const std::vector<uint8_t> packed = cpu::pack_residual_indices(a.v);
  if (packed.empty()) GTEST_SKIP() << "no int8 lookup kernel on this CPU";
  std::vector<float> x(1024, 1.0f), y(64, 0.0f);
  EXPECT_THROW(cpu::residual_matmul(b.v, x.data(), 1, y.data(), &packed), Error);
}
