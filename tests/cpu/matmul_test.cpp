// CPU matmul: the fast path (matmul) against the scalar reference (matmul_ref) and against an
// exact rebuild of what the int8 kernels compute, for every weight type, on random encoded
// weights and on random raw block bytes (every code, including PQ2_0/TQ2_0/Q2_0 code 3 and base-3
// bytes the encoder never writes).
//
// Tolerances, per output y[t, r] (W = weights decoded by to_float, x = activations):
//
//   type            fast vs matmul_ref                     fast vs int8 rebuild
//   F32/F16/BF16    1e-5 * sum_k |W_rk x_k|                 (no int8 step)
//   quantized       sum_k |W_rk| * d_b(k)/2  +  rebuild tol 1e-5 * U_r,
//                                                          U_r = sum_k (|W_rk| + 2*off*|d_rk|) * |xq_k|
//
// * Float paths: the weights convert to float exactly (fp16/bf16 -> f32 is exact), so the only
//   difference is float vs double summation: with 8 lanes and <= 4 accumulators a lane's chain
//   is <= cols/8 = 256 FMAs, relative error well under 256 * 2^-24 = 1.5e-5 of sum |W x| in the
//   worst case and ~1e-7 in practice.
// * Quantized paths: activations are rounded to int8 with one scale per weight block b,
//   d_b = amax_b/127, so |x_k - xq_k| <= d_b/2 (= amax_b/254, the "1/127 per block" relative
//   error) and |sum W (x - xq)| <= sum |W| d_b/2. What remains is float rounding of the kernel's
//   exact integer block sums: their magnitude is at most sum |code * d_w * xq| with
//   |code| <= |W/d_w| + offset, plus the offset correction (same size) = U_r; chains of <= 64
//   FMAs give well under 1e-5 relative. The rebuild (sum over positions of W * d_b * q, double)
//   equals the kernel's exact arithmetic, so a single wrong code or a misplaced element (an error
//   of |d_w * xq_k|, ~1/cols of U_r) fails it, while the sum_k |W| d_b/2 bound alone is loose.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "formats/blocks.h"
#include "formats/error.h"
#include "formats/fp16.h"
#include "formats/tensor_set.h"
#include "formats/types.h"
#include "runtime/cpu/act_quant.h"
#include "runtime/cpu/bandwidth.h"
#include "runtime/cpu/kernels_avx2.h"
#include "runtime/cpu/kernels_avx512.h"
#include "runtime/cpu/matmul.h"

using namespace bonsai;

namespace {

constexpr double kFloatRel = 1e-5;
constexpr double kRebuildRel = 1e-5;

// Byte offset of the fp16 scale d within a block (spec §1: first, or last for the base-3 and
// TQ2_0 layouts); -1 for the float types.
int scale_offset(TypeId id) {
  switch (id) {
    case TypeId::Q8_0: return offsetof(block_q8_0, d);
    case TypeId::Q4_0: return offsetof(block_q4_0, d);
    case TypeId::Q1_0: return offsetof(block_q1_0, d);
    case TypeId::Q2_0: return offsetof(block_q2_0, d);
    case TypeId::PQ2_0: return offsetof(block_pq2_0, d);
    case TypeId::TQ1_0: return offsetof(block_tq1_0, d);
    case TypeId::TQ2_0: return offsetof(block_tq2_0, d);
    case TypeId::PTQ1_0: return offsetof(block_ptq1_0, d);
    default: return -1;
  }
}

struct Weights {
  std::vector<uint8_t> bytes;
  Tensor t;
  std::vector<float> w;   // decoded with to_float, rows x cols
  std::vector<float> dw;  // |block scale| per element (0 for float types)

  Weights() = default;
  // Copies own their bytes: the tensor must point at them, not at the original's.
  Weights(const Weights& o) : bytes(o.bytes), t(o.t), w(o.w), dw(o.dw) { t.data = bytes.data(); }
  Weights& operator=(const Weights& o) {
    bytes = o.bytes;
    t = o.t;
    t.data = bytes.data();
    w = o.w;
    dw = o.dw;
    return *this;
  }

  int64_t rows() const { return t.ne[1]; }
  int64_t cols() const { return t.ne[0]; }
  // Refresh w/dw after editing bytes.
  void decode() {
    const TypeTraits& tt = traits(t.type);
    w.resize(size_t(rows() * cols()));
    dw.assign(w.size(), 0.0f);
    tt.to_float(bytes.data(), w.data(), int64_t(w.size()));
    const int off = scale_offset(t.type);
    if (off < 0) return;
    for (size_t k = 0; k < w.size(); ++k) {
      const size_t b = k / size_t(tt.block_elems);
      uint16_t h;
      std::memcpy(&h, bytes.data() + b * size_t(tt.block_bytes) + size_t(off), 2);
      dw[k] = std::fabs(fp16_to_f32(h));
    }
  }
};

// raw = false: random normal floats through from_float (blocks as the quantizer writes them).
// raw = true (quantized types): every byte random, then each scale set to a random fp16 of
// either sign in [0.25, 2): all code patterns, and finite values.
Weights make_weights(TypeId id, int64_t rows, int64_t cols, bool raw, std::mt19937& rng) {
  const TypeTraits& tt = traits(id);
  Weights m;
  const int64_t ne[2] = {cols, rows};
  m.bytes.resize(*tensor_bytes(id, ne));
  const int off = scale_offset(id);
  if (raw && off >= 0) {
    for (auto& b : m.bytes) b = uint8_t(rng());
    std::uniform_real_distribution<float> u(0.25f, 2.0f);
    for (size_t b = 0; b < m.bytes.size(); b += size_t(tt.block_bytes)) {
      const uint16_t h = f32_to_fp16((rng() & 1) ? u(rng) : -u(rng));
      std::memcpy(m.bytes.data() + b + size_t(off), &h, 2);
    }
  } else {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> f(size_t(rows * cols));
    for (auto& v : f) v = nd(rng);
    tt.from_float(f.data(), m.bytes.data(), int64_t(f.size()));
  }
  m.t.name = std::string("blk.0.test.") + tt.name;
  m.t.type = id;
  m.t.ne = {cols, rows};
  m.t.data = m.bytes.data();
  m.t.nbytes = m.bytes.size();
  m.decode();
  return m;
}

std::vector<float> random_x(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  return x;
}

// "" when `fast` (outputs of W x for n tokens) is within tolerance of matmul_ref and, when the
// int8 kernels ran, of their exact rebuild; else which output is off and by how much. Also checks
// matmul_ref against the exact sum. `layout`: the activations' layout of the product that gave
// `fast` (cpu::act_layout_taken with the copy it read), null for a float product.
std::string mismatch(const Weights& m, const std::vector<float>& x, int64_t n_tokens, const std::vector<float>& fast,
                     const cpu::ActLayout* layout) {
  const int64_t rows = m.rows(), cols = m.cols();
  std::vector<float> ref(size_t(rows * n_tokens));
  cpu::matmul_ref(m.t, x.data(), n_tokens, ref.data());

  const bool int8_path = layout != nullptr;
  cpu::QuantAct a;
  std::vector<int> elem;
  if (int8_path) {
    cpu::quantize_act(*layout, x.data(), cols, n_tokens, a);
    for (int p = 0; p < layout->qk; ++p) elem.push_back(layout->elem(p));
  }
  auto off = [&](const char* what, int64_t t, int64_t r, double got, double want, double tol) {
    std::ostringstream os;
    os << what << " t=" << t << " r=" << r << ": " << got << " vs " << want << " (tolerance " << tol << ")";
    return os.str();
  };
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      const float* w = m.w.data() + r * cols;
      const float* xt = x.data() + t * cols;
      const size_t o = size_t(t * rows + r);
      // matmul_ref is the exact sum rounded once.
      double exact = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        exact += double(w[k]) * xt[k];
        mag += std::fabs(double(w[k]) * xt[k]);
      }
      if (!(std::fabs(ref[o] - exact) <= 1e-6 * mag + 1e-30)) return off("ref vs exact", t, r, ref[o], exact, 1e-6 * mag);
      if (!int8_path) {
        const double tol = kFloatRel * mag + 1e-30;
        if (!(std::fabs(fast[o] - ref[o]) <= tol)) return off("fast vs ref", t, r, fast[o], ref[o], tol);
        continue;
      }
      // Rebuild: weight element elem(p) of each block times the dequantized activation at p.
      double rebuilt = 0, u = 0, quant_err = 0;
      for (int64_t k0 = 0; k0 < cols; k0 += layout->qk)
        for (int p = 0; p < layout->qk; ++p) {
          const int64_t k = k0 + elem[size_t(p)];
          const int64_t pos = t * cols + k0 + p;
          const double d = a.d[size_t(pos / layout->qk)];
          const double xq = d * a.q[size_t(pos)];
          rebuilt += double(w[k]) * xq;
          u += (std::fabs(w[k]) + 2.0 * layout->offset * m.dw[size_t(r * cols + k)]) * std::fabs(xq);
          quant_err += std::fabs(w[k]) * d / 2;
        }
      const double tol = kRebuildRel * u + 1e-30;
      if (!(std::fabs(fast[o] - rebuilt) <= tol)) return off("fast vs int8 rebuild", t, r, fast[o], rebuilt, tol);
      const double qtol = quant_err * (1 + 1e-5) + tol;
      if (!(std::fabs(fast[o] - ref[o]) <= qtol)) return off("fast vs ref", t, r, fast[o], ref[o], qtol);
    }
  return "";
}

// The product as the CPU backend computes it: with the weight's regrouped copy, where its kernel
// reads one (pack_weights, made on the path taken now), and the activations' layout it took.
struct Product {
  std::vector<float> y;
  const cpu::ActLayout* layout;
};
Product run_matmul(const Weights& m, const std::vector<float>& x, int64_t n_tokens) {
  std::vector<float> y(size_t(m.rows() * n_tokens));
  cpu::HugePageArena pages;
  const auto packed = cpu::pack_weights(m.t, pages);
  cpu::matmul(m.t, x.data(), n_tokens, y.data(), packed);
  return {y, cpu::act_layout_taken(m.t, packed)};
}

const char* kinds[] = {"encoded", "raw"};

// Runs check() once on every vector path this CPU has (avx2, then avx512 where it has it), each
// the widest path matmul may take meanwhile; the label names the path for the failure message.
template <class Check>
void on_each_path(const Check& check) {
  const cpu::MatmulPath best = cpu::matmul_path_taken();
  for (cpu::MatmulPath p : {cpu::MatmulPath::avx2, cpu::MatmulPath::avx512}) {
    if (p > best) break;
    cpu::cap_matmul_path(p);
    check(std::string("path ") + cpu::matmul_path());
  }
  cpu::cap_matmul_path(cpu::MatmulPath::avx512);
}

}  // namespace

TEST(CpuMatmul, TakesTheWidestPathTheCpuHas) {
  __builtin_cpu_init();
  const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
                      __builtin_cpu_supports("avx512vbmi2");
  EXPECT_STREQ(cpu::matmul_path(), avx512 ? "avx512" : avx2 ? "avx2" : "scalar");
  const cpu::MatmulPath before = cpu::cap_matmul_path(cpu::MatmulPath::avx2);
  EXPECT_STREQ(cpu::matmul_path(), avx2 ? "avx2" : "scalar");
  cpu::cap_matmul_path(before);
}

// Every type x cols {256, 512, 768, 2048} (float types also 37, 100; 32-element blocks also 160;
// PTQ1_0 also 2560)
// x rows {1, 5, 67, 300} x tokens {1, 3, 17}: rows 67 split unevenly over threads, 300 rows fill
// two of the AVX-512 PTQ1_0 kernel's groups of 128 and part of a third, 17 tokens leave a partial
// group of 4, and the large shapes take the threaded, tiled path while the small ones run on one
// thread.
TEST(CpuMatmul, FastPathMatchesReferenceForEveryType) {
  on_each_path([](const std::string& path) {
    std::mt19937 rng(7);
    for (const TypeTraits& tt : all_types()) {
      for (bool raw : {false, true}) {
        if (raw && !tt.quantized) continue;
        std::vector<int64_t> widths = {256, 512, 768, 2048};
        if (tt.block_elems == 1) widths.insert(widths.begin(), {37, 100});  // float tails past the last 8 / 32
        if (tt.block_elems == 32) widths.push_back(160);  // AVX-512 Q8_0: a partial slab of 5 blocks alone
        if (tt.id == TypeId::PTQ1_0) widths.push_back(2560);  // AVX-512: a slab of 16 blocks and one of 4
        for (int64_t cols : widths)
          for (int64_t rows : {1, 5, 67, 300}) {
            const Weights m = make_weights(tt.id, rows, cols, raw, rng);
            for (int64_t n : {1, 3, 17}) {
              const auto x = random_x(cols * n, rng);
              const std::string what = path + " " + tt.name + " " + kinds[raw] + " " + std::to_string(cols) + "x" +
                                       std::to_string(rows) + " n=" + std::to_string(n);
              const Product p = run_matmul(m, x, n);
              ASSERT_EQ(mismatch(m, x, n, p.y, p.layout), "") << what;
            }
          }
      }
    }
  });
}

// Token t is one-hot at element t, so output [t, r] must be W[r, t] itself: every element of
// every block position must land on its own weight (a layout or unpacking slip shows as a wrong
// value at a precise place). One call of cols tokens exercises the prompt kernels, and one call
// per token the per-token ones, each reading the kernel's copy where it has one.
TEST(CpuMatmul, OneHotActivationsPickEachWeight) {
  on_each_path([](const std::string& path) {
    std::mt19937 rng(11);
    for (const TypeTraits& tt : all_types()) {
      const int64_t cols = 512, rows = 3;
      const Weights m = make_weights(tt.id, rows, cols, tt.quantized, rng);
      std::vector<float> x(size_t(cols * cols), 0.0f);
      for (int64_t t = 0; t < cols; ++t) x[size_t(t * cols + t)] = 1.0f;
      std::vector<float> all(size_t(rows * cols)), one(all.size());
      cpu::HugePageArena pages;
      const auto packed = cpu::pack_weights(m.t, pages);  // the regrouped copies' layouts too
      cpu::matmul(m.t, x.data(), cols, all.data(), packed);
      for (int64_t t = 0; t < cols; ++t) cpu::matmul(m.t, x.data() + t * cols, 1, one.data() + t * rows, packed);
      for (const auto& [y, how] : {std::pair{&all, "all tokens"}, {&one, "one token"}})
        for (int64_t t = 0; t < cols; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const float want = m.w[size_t(r * cols + t)];
            // 1.0 quantizes to 127 * (1/127): exact to a few ulps; the offset correction cancels the
            // offset to a few ulps of the scale.
            ASSERT_NEAR((*y)[size_t(t * rows + r)], want, 1e-6 * (std::fabs(want) + 32 * m.dw[size_t(r * cols + t)]))
                << path << " " << tt.name << " " << how << ", element " << t << " row " << r;
          }
    }
  });
}

// The checks can fail: after one stored code byte changes, the result computed before the
// change (what a kernel that skipped the byte would return) must fail them, the new one must
// pass, and no other row may move.
TEST(CpuMatmul, CorruptedWeightByteIsCaught) {
  on_each_path([](const std::string& path) {
    std::mt19937 rng(3);
    for (const TypeTraits& tt : all_types()) {
      if (!tt.quantized) continue;
      const int64_t cols = 512, rows = 4;
      Weights m = make_weights(tt.id, rows, cols, false, rng);
      const Weights orig = m;
      // First code byte (never the scale) of row 2's second block whose flip changes a weight.
      const int off = scale_offset(tt.id);
      const size_t block = 2 * (m.bytes.size() / size_t(rows)) + size_t(tt.block_bytes);
      std::vector<int64_t> changed;
      for (size_t i = (off == 0 ? 2 : 0); changed.empty(); ++i) {
        ASSERT_LT(i, size_t(tt.block_bytes) - (off == 0 ? 0 : 2)) << path << " " << tt.name << ": no byte flip changes a weight";
        m = orig;
        m.bytes[block + i] ^= 0xff;
        m.decode();
        for (int64_t k = 0; k < cols; ++k)
          if (m.w[size_t(2 * cols + k)] != orig.w[size_t(2 * cols + k)]) changed.push_back(k);
      }
      // Activations that make the change count: 4 * sign(change) on the changed elements.
      auto x = random_x(cols, rng);
      for (int64_t k : changed) x[size_t(k)] = m.w[size_t(2 * cols + k)] > orig.w[size_t(2 * cols + k)] ? 4.0f : -4.0f;
      const auto before = run_matmul(orig, x, 1);
      const auto after = run_matmul(m, x, 1);
      EXPECT_EQ(mismatch(orig, x, 1, before.y, before.layout), "") << path << " " << tt.name;
      EXPECT_EQ(mismatch(m, x, 1, after.y, after.layout), "") << path << " " << tt.name;
      EXPECT_NE(mismatch(m, x, 1, before.y, after.layout), "")
          << path << " " << tt.name << ": stale result passes the corrupted weights";
      for (int64_t r = 0; r < rows; ++r)
        if (r != 2) {
          EXPECT_EQ(after.y[size_t(r)], before.y[size_t(r)]) << path << " " << tt.name << " row " << r;
        }
    }
  });
}

// Each output row is computed whole by one thread: the thread count must not change a bit.
TEST(CpuMatmul, ResultDoesNotDependOnThreadCount) {
  std::mt19937 rng(5);
  const int saved = omp_get_max_threads();
  // The product on 3 threads, after checking it bit for bit against 1 thread.
  auto on_3_threads = [](const Weights& m, const std::vector<float>& x, int64_t tokens, TypeId id) {
    std::vector<float> y1(size_t(m.rows() * tokens)), y3(y1.size());
    cpu::HugePageArena pages;
    const auto packed = cpu::pack_weights(m.t, pages);
    omp_set_num_threads(1);
    cpu::matmul(m.t, x.data(), tokens, y1.data(), packed);
    omp_set_num_threads(3);
    cpu::matmul(m.t, x.data(), tokens, y3.data(), packed);
    EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * 4)) << traits(id).name;
    return Product{y3, cpu::act_layout_taken(m.t, packed)};
  };
  for (TypeId id : {TypeId::F16, TypeId::Q8_0, TypeId::PTQ1_0, TypeId::TQ1_0}) {
    const Weights m = make_weights(id, 131, 1024, false, rng);
    on_3_threads(m, random_x(1024 * 5, rng), 5, id);
  }
  // Prompt-sized products: float weights as SGEMMs over tiles of 256 rows (600 rows end in a
  // partial tile); quantized ones unpacked by tiles of rows (3072 columns: tiles of 21 rows), with
  // 20 tokens ending in a group that overlaps the one before.
  for (auto [id, cols] : {std::pair{TypeId::BF16, int64_t(96)}, {TypeId::PTQ1_0, 3072}, {TypeId::TQ2_0, 3072}}) {
    const Weights f = make_weights(id, 600, cols, false, rng);
    const auto xf = random_x(cols * 20, rng);
    const Product p = on_3_threads(f, xf, 20, id);
    EXPECT_EQ("", mismatch(f, xf, 20, p.y, p.layout)) << traits(id).name;
  }
  omp_set_num_threads(saved);
}

// pack_weights copies exactly the weights a kernel reads from a copy. AVX-512: Q8_0's and PQ2_0's
// regrouped (any width), as many bytes as the weight; PTQ1_0's as codes for table lookups, 30 bytes
// a block (28 stored) in groups of 128 rows (these 5 rows padded to 128); TQ2_0's as PQ2_0's, 68
// bytes for every 66 (its products, exact against the rebuild, show the values are the weight's).
// AVX2: Q8_0's and PTQ1_0's in split rows (each row's scales, then its blocks' codes; PTQ1_0's as
// PQ2_0 codes) that put together again decode to the very same floats, 64 bytes more; none for
// PQ2_0 and TQ2_0. A copy that is missing or of the
// wrong size sends the product to the AVX2 kernel of the stored blocks, so the result still holds.
TEST(CpuMatmul, KernelCopyOnlyWhereAKernelReadsOne) {
  on_each_path([](const std::string& path) {
    std::mt19937 rng(13);
    const bool avx512 = cpu::matmul_path_taken() == cpu::MatmulPath::avx512;
    for (auto [id, cols] : {std::pair{TypeId::PTQ1_0, int64_t(512)}, {TypeId::PTQ1_0, 384}, {TypeId::Q8_0, 512},
                            {TypeId::Q8_0, 96}, {TypeId::PQ2_0, 384}, {TypeId::TQ2_0, 512}, {TypeId::F16, 512}}) {
      for (const bool encoded : {true, false}) {
        const Weights m = make_weights(id, 5, cols, encoded, rng);
        const std::string what = path + " " + traits(id).name + " " + std::to_string(cols) + " " + kinds[encoded ? 0 : 1];
        const uint64_t split_bytes = m.t.nbytes / traits(id).block_bytes * sizeof(block_pq2_0) + 64;
        const bool split = id == TypeId::PTQ1_0 || id == TypeId::Q8_0;  // AVX2's copies
        const uint64_t lookup_bytes = uint64_t(128 * cols / 128 * 30);  // PTQ1_0 on AVX-512
        const uint64_t as_pq2_bytes = uint64_t(5 * cols / 128 * 34);     // TQ2_0 on AVX-512: PQ2_0 blocks
        const uint64_t copy_bytes = id == TypeId::F16 ? 0
                                    : !avx512     ? (split ? split_bytes : 0)
                                    : id == TypeId::PTQ1_0 ? lookup_bytes
                                    : id == TypeId::TQ2_0  ? as_pq2_bytes
                                                           : m.t.nbytes;
        cpu::HugePageArena pages;
        const auto packed = cpu::pack_weights(m.t, pages);
        ASSERT_EQ(packed.size(), copy_bytes) << what;
        if (avx512 && copy_bytes > 0) {
          const size_t both = std::min<size_t>(packed.size(), m.t.nbytes);  // PTQ1_0's copy is larger
          EXPECT_NE(0, std::memcmp(packed.data(), m.t.data, both)) << what << ": the copy is regrouped";
        }
        if (!avx512 && copy_bytes > 0) {  // every value of the weight, bit for bit, as PQ2_0 / Q8_0 decode it
          const TypeId as = id == TypeId::PTQ1_0 ? TypeId::PQ2_0 : TypeId::Q8_0;
          const int64_t nb = cols / traits(as).block_elems, bb = traits(as).block_bytes;
          std::vector<uint8_t> blocks(size_t(5 * nb * bb));
          for (int64_t b = 0; b < 5 * nb; ++b) {  // block b: row b / nb; its scale, then its codes
            const uint8_t* row = packed.data() + b / nb * nb * bb;
            std::memcpy(&blocks[size_t(b * bb)], row + 2 * (b % nb), 2);
            std::memcpy(&blocks[size_t(b * bb + 2)], row + 2 * nb + (b % nb) * (bb - 2), size_t(bb - 2));
          }
          std::vector<float> stored(size_t(cols * 5)), copied(stored.size());
          traits(id).to_float(m.t.data, stored.data(), int64_t(stored.size()));
          traits(as).to_float(blocks.data(), copied.data(), int64_t(copied.size()));
          EXPECT_EQ(0, std::memcmp(stored.data(), copied.data(), stored.size() * sizeof(float))) << what;
        }
        const auto x = random_x(cols * 2, rng);
        std::vector<float> y(size_t(m.rows() * 2));
        const std::vector<uint8_t> wrong(3);
        for (const std::span<const uint8_t> p : {packed, std::span<const uint8_t>(wrong), std::span<const uint8_t>()}) {
          cpu::matmul(m.t, x.data(), 2, y.data(), p);
          EXPECT_EQ(mismatch(m, x, 2, y, cpu::act_layout_taken(m.t, p)), "") << what;
        }
      }
    }
  });
}

// Where a copy is given, the kernel reads it and not the weight: a product handed another
// weight's Q8_0 copy gives that weight's result with that copy, bit for bit.
TEST(CpuMatmul, Q8CopyIsWhatTheKernelReads) {
  if (cpu::matmul_path_taken() == cpu::MatmulPath::scalar) GTEST_SKIP() << "no Q8_0 kernel with a copy on this CPU";
  std::mt19937 rng(19);
  const Weights a = make_weights(TypeId::Q8_0, 7, 256, false, rng), b = make_weights(TypeId::Q8_0, 7, 256, false, rng);
  cpu::HugePageArena pages;
  const auto copy_of_b = cpu::pack_weights(b.t, pages);
  const auto x = random_x(256, rng);
  std::vector<float> from_copy(7), from_b(7);
  cpu::matmul(a.t, x.data(), 1, from_copy.data(), copy_of_b);
  cpu::matmul(b.t, x.data(), 1, from_b.data(), copy_of_b);
  EXPECT_EQ(from_copy, from_b);
  EXPECT_EQ("", mismatch(b, x, 1, from_copy, cpu::act_layout_taken(b.t, copy_of_b)));
}

// matmul_shared gives each weight exactly what its own matmul call gives (the same quantized
// activations, the same kernels), bit for bit: weights of 5, 300 and 3 rows (steps of rows cross
// from one to the next; the second is three of the AVX-512 PTQ1_0 kernel's groups of 128 rows),
// one token and prompt sizes, on every path. Widths that differ are an
// error naming the weight.
TEST(CpuMatmul, SharedInputProductsMatchSeparateCalls) {
  on_each_path([](const std::string& path) {
    std::mt19937 rng(17);
    for (TypeId id : {TypeId::PTQ1_0, TypeId::Q8_0, TypeId::TQ1_0, TypeId::F16}) {
      const int64_t cols = 512;
      std::vector<Weights> ws;
      for (int64_t rows : {5, 300, 3}) ws.push_back(make_weights(id, rows, cols, true, rng));
      cpu::HugePageArena pages;
      std::vector<std::span<const uint8_t>> packs;
      for (const Weights& w : ws) packs.push_back(cpu::pack_weights(w.t, pages));
      for (int64_t n : {1, 3, 17}) {
        const auto x = random_x(cols * n, rng);
        std::vector<std::vector<float>> apart, together;
        const Tensor* w[3];
        float* y[3];
        std::span<const uint8_t> copies[3];
        for (size_t i = 0; i < ws.size(); ++i) {
          apart.emplace_back(size_t(ws[i].rows() * n));
          together.emplace_back(size_t(ws[i].rows() * n), -1.0f);
          cpu::matmul(ws[i].t, x.data(), n, apart[i].data(), packs[i]);
          w[i] = &ws[i].t;
          y[i] = together[i].data();
          copies[i] = packs[i];
        }
        cpu::matmul_shared(w, y, 3, x.data(), n, copies);
        for (size_t i = 0; i < ws.size(); ++i)
          EXPECT_EQ(0, std::memcmp(apart[i].data(), together[i].data(), apart[i].size() * sizeof(float)))
              << path << " " << traits(id).name << " weight " << i << " n=" << n;
      }
    }
  });
  std::mt19937 rng(19);
  const Weights a = make_weights(TypeId::Q8_0, 2, 256, false, rng), b = make_weights(TypeId::Q8_0, 2, 512, false, rng);
  const Tensor* w[2] = {&a.t, &b.t};
  std::vector<float> x(512), y0(2), y1(2);
  float* y[2] = {y0.data(), y1.data()};
  try {
    cpu::matmul_shared(w, y, 2, x.data(), 1, nullptr);
    ADD_FAILURE() << "weights of different widths were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(b.t.name), std::string::npos) << e.what();
  }
}

// A NaN activation poisons every output, as in float math, instead of vanishing in int8.
TEST(CpuMatmul, NonFiniteActivationPropagates) {
  std::mt19937 rng(9);
  for (TypeId id : {TypeId::Q8_0, TypeId::PTQ1_0, TypeId::F32}) {
    const Weights m = make_weights(id, 4, 512, false, rng);
    auto x = random_x(512, rng);
    x[100] = std::numeric_limits<float>::quiet_NaN();
    for (float v : run_matmul(m, x, 1).y) EXPECT_TRUE(std::isnan(v)) << traits(id).name;
  }
}

TEST(CpuMatmul, RejectsMalformedTensorsNamingThem) {
  std::mt19937 rng(1);
  Weights m = make_weights(TypeId::PTQ1_0, 2, 256, false, rng);
  std::vector<float> x(256), y(2);
  auto expect_error = [&](const Tensor& t, const char* what) {
    try {
      cpu::matmul(t, x.data(), 1, y.data());
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(t.name), std::string::npos) << e.what();
    }
  };
  Tensor t = m.t;
  t.nbytes -= 1;
  expect_error(t, "short data");
  t = m.t;
  t.ne = {256, 1, 2};
  expect_error(t, "3-D");
  t = m.t;
  t.ne = {200, 2};  // not a whole number of 128-blocks
  expect_error(t, "partial block");
  t = m.t;
  t.data = nullptr;
  expect_error(t, "no data");
  EXPECT_THROW(cpu::matmul(m.t, x.data(), -1, y.data()), Error);
}

TEST(CpuGetRows, MatchesToFloatForEveryType) {
  std::mt19937 rng(2);
  for (const TypeTraits& tt : all_types()) {
    const Weights m = make_weights(tt.id, 9, 256, tt.quantized, rng);
    const int32_t ids[] = {8, 0, 3, 3};
    std::vector<float> out(4 * 256);
    cpu::get_rows(m.t, ids, 4, out.data());
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(0, std::memcmp(out.data() + i * 256, m.w.data() + ids[i] * 256, 256 * 4)) << tt.name << " " << i;
  }
}

TEST(CpuGetRows, RejectsOutOfRangeIds) {
  std::mt19937 rng(2);
  const Weights m = make_weights(TypeId::Q8_0, 9, 256, false, rng);
  std::vector<float> out(256);
  for (int32_t bad : {9, -1}) {
    try {
      cpu::get_rows(m.t, &bad, 1, out.data());
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(m.t.name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

// The activation quantizer's contract (act_quant.h), which the rebuild above relies on.
TEST(CpuQuantizeAct, LayoutsArePermutationsAndRoundingIsHalfAStep) {
  std::mt19937 rng(4);
  for (const TypeTraits& tt : all_types()) {
    const cpu::ActLayout* l = cpu::act_layout(tt.id);
    if (!l) {
      EXPECT_FALSE(tt.quantized) << tt.name;
      continue;
    }
    ASSERT_EQ(l->qk, tt.block_elems) << tt.name;
    std::vector<int> seen(size_t(l->qk), 0);
    for (int p = 0; p < l->qk; ++p) {
      const int e = l->elem(p);
      ASSERT_TRUE(e >= 0 && e < l->qk) << tt.name;
      ++seen[size_t(e)];
    }
    for (int s : seen) ASSERT_EQ(s, 1) << tt.name << " layout is not a permutation";

    const int64_t cols = 2 * l->qk, n = 2;
    auto x = random_x(cols * n, rng);
    for (int i = 0; i < l->qk; ++i) x[size_t(l->elem(i))] = 0.0f;  // token 0's first block all zero
    cpu::QuantAct a;
    quantize_act(*l, x.data(), cols, n, a);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t b = 0; b < cols / l->qk; ++b) {
        // one scale per block: amax over all of its positions
        const int64_t base = t * cols + b * l->qk;
        const float d = a.d[size_t(t * (cols / l->qk) + b)];
        float amax = 0;
        int sum = 0;
        for (int p = 0; p < l->qk; ++p) amax = std::fmax(amax, std::fabs(x[size_t(base + l->elem(p))]));
        ASSERT_EQ(d, amax / 127.0f) << tt.name;
        for (int p = 0; p < l->qk; ++p) {
          const int q = a.q[size_t(base + p)];
          ASSERT_LE(std::abs(q), 127);
          EXPECT_LE(std::fabs(x[size_t(base + l->elem(p))] - d * q), d / 2 * (1 + 1e-6)) << tt.name;
          sum += q;
        }
        const double corr = double(d) * sum;
        EXPECT_NEAR(a.corr[size_t(t * (cols / l->qk) + b)], l->offset * corr, 1e-5 * std::fabs(l->offset * corr) + 1e-6)
            << tt.name;
      }
    EXPECT_EQ(a.d[0], 0.0f) << tt.name;
  }
}

#if defined(__x86_64__)
// The AVX2 quantizer (what matmul runs) writes exactly the bytes of the scalar definition, on
// random values, exact ties (k + 1/2 steps), all-zero blocks and non-finite values.
TEST(CpuQuantizeAct, Avx2QuantizerIsBitExact) {
  if (cpu::matmul_path_taken() < cpu::MatmulPath::avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(8);
  for (const TypeTraits& tt : all_types()) {
    const cpu::ActLayout* l = cpu::act_layout(tt.id);
    if (!l) continue;
    const int64_t cols = 2 * std::max(l->qk, 256), n = 3;
    auto x = random_x(cols * n, rng);
    for (int i = 0; i < l->qk; ++i) {
      x[size_t(l->elem(i))] = 0.0f;                                     // token 0, block 0: zero
      x[size_t(cols + l->elem(i))] = 0.5f * float(i % 32 - 16) + 0.25f;  // token 1, block 0: x/d = k + 1/2
    }
    x[size_t(cols + l->elem(0))] = 63.5f;  // amax: d = 0.5 and 1/d = 2 exactly, so the ties are exact
    x[size_t(2 * cols + 5)] = std::numeric_limits<float>::infinity();
    x[size_t(2 * cols + 300)] = std::numeric_limits<float>::quiet_NaN();
    cpu::QuantAct want, got;
    cpu::quantize_act(*l, x.data(), cols, n, want);
    got.reset(*l, cols, n);
    cpu::avx2::quantize_act(got.elem.data(), got.qk, got.offset, x.data(), cols, n, got.q.data(), got.d.data(),
                            got.corr.data());
    EXPECT_EQ(got.q, want.q) << tt.name;
    ASSERT_EQ(got.d.size(), want.d.size());
    EXPECT_EQ(0, std::memcmp(got.d.data(), want.d.data(), got.d.size() * 4)) << tt.name;
    EXPECT_EQ(0, std::memcmp(got.corr.data(), want.corr.data(), got.corr.size() * 4)) << tt.name;
  }
}
#endif

#if defined(__x86_64__)
// The bandwidth probe's read loops (AVX2, and AVX-512 where the CPU has it), with and without
// prefetch, sum every word, tail included (n not a multiple of their 16-word step), with carries
// across the 64-bit lanes' wrap-around as plain addition has them.
TEST(CpuBandwidth, ReadLoopsSumEveryWord) {
  if (cpu::matmul_path_taken() < cpu::MatmulPath::avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const bool avx512 = cpu::avx512_usable();
  std::mt19937_64 rng(3);
  for (int64_t n : {0, 1, 15, 16, 17, 1000, 4099}) {
    std::vector<uint64_t> v(static_cast<size_t>(n), 0);
    uint64_t want = 0;
    for (auto& w : v) want += (w = rng());
    for (int64_t ahead : {0, 8192}) {
      EXPECT_EQ(cpu::avx2::read_sum(v.data(), n, ahead), want) << n << " words, ahead " << ahead;
      if (avx512) {
        EXPECT_EQ(cpu::avx512::read_sum(v.data(), n, ahead), want) << "AVX-512: " << n << " words, ahead " << ahead;
      }
    }
  }
}
#endif

// STREAM's rule: a buffer of four last-level caches (here the L3 that sysconf reports) reads from
// memory, not from the cache; 256 MB at least.
TEST(CpuBandwidth, DefaultBufferIsFourLastLevelCaches) {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  EXPECT_GE(cpu::default_probe_bytes(), size_t(256) << 20);
  if (l3 > 0) {
    EXPECT_GE(cpu::default_probe_bytes(), 4 * size_t(l3));
  }
}

TEST(CpuBandwidth, MeasuresAPositiveFiniteRateAgainAndAgain) {
  cpu::ReadProbe probe(size_t(4) << 20);
  for (int i = 0; i < 2; ++i) {  // the kept buffer serves every probe
    const double gbs = probe.measure_gbs(2);
    EXPECT_GT(gbs, 0.0);
    EXPECT_TRUE(std::isfinite(gbs));
  }
}
