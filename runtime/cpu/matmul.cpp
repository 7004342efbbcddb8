#include "runtime/cpu/matmul.h"

#include <cblas.h>
#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "formats/blocks.h"
#include "formats/error.h"
#include "runtime/cpu/act_quant.h"
#include "runtime/cpu/parallel.h"
#if BONSAI_CPU_AVX2
#include "runtime/cpu/kernels_avx2.h"
#include "runtime/cpu/kernels_avx512.h"
#endif

namespace bonsai::cpu {
namespace {

// A weight matrix as the kernels read it: w's own bytes, or its copy (pack_weights) in the copy's
// type; `split` where that copy is the AVX2 kernel's (avx2::split_rows).
struct Matrix {
  const TypeTraits* type;
  int64_t rows, cols;
  uint64_t row_bytes;
  const uint8_t* data;
  bool split = false;
};

Matrix check_matrix(const Tensor& w, const char* op) {
  const TypeTraits* tt = find_type(uint32_t(w.type));
  if (!tt) fail(w.name, op, ": unknown tensor type id ", uint32_t(w.type));
  if (w.ne.size() != 2 || w.ne[0] <= 0 || w.ne[1] < 0)
    fail(w.name, op, ": expected a 2-D tensor [cols, rows], got ", w.shape_str());
  const auto want = tensor_bytes(w.type, w.ne);
  if (!want)
    fail(w.name, op, ": rows of ", w.ne[0], " elements are not a whole number of ", tt->name, " blocks of ",
         tt->block_elems);
  if (*want != w.nbytes)
    fail(w.name, op, ": holds ", w.nbytes, " bytes, a ", tt->name, " tensor ", w.shape_str(), " has ", *want);
  if (w.nbytes > 0 && !w.data) fail(w.name, op, ": tensor has no data");
  return {tt, w.ne[1], w.ne[0], *row_bytes(w.type, uint64_t(w.ne[0])), w.data};
}

void check_count(const Tensor& w, const char* op, const char* what, int64_t n) {
  if (n < 0) fail(w.name, op, ": negative ", what, " count ", n);
}

// A prompt's product with float weights is a GEMM, and OpenBLAS's SGEMM runs it near the FMA
// peak, where the dot-product kernels (made for one token, bound by loads) reach a third of it.
// From kGemmTokens (parallel.h) tokens on, the weights are decoded to float in tiles of rows, each
// tile one SGEMM on one thread of the team (whose threads OpenBLAS keeps to themselves: team::run),
// so no tile's result depends on the thread count.
constexpr int64_t kGemmTileRows = 256;

// The widest path matmul may take (cap_matmul_path): the CPU's best unless capped.
std::atomic<MatmulPath> path_cap{MatmulPath::avx512};

bool float_weights(TypeId t) { return t == TypeId::F32 || t == TypeId::F16 || t == TypeId::BF16; }

void matmul_gemm(const Matrix& m, const float* x, int64_t n_tokens, float* y) {
  thread_local std::vector<float> tile;  // each thread's decoded rows, kept for the next call
  parallel_dynamic((m.rows + kGemmTileRows - 1) / kGemmTileRows, true, [&](int64_t i) {
    const int64_t r0 = i * kGemmTileRows, nr = std::min(kGemmTileRows, m.rows - r0);
    const uint8_t* src = m.data + uint64_t(r0) * m.row_bytes;
    tile.resize(size_t(nr * m.cols));
#if BONSAI_CPU_AVX2
    if (!avx2_usable() || !avx2::float_to_f32(m.type->id, src, nr * m.cols, tile.data()))
#endif
      m.type->to_float(src, tile.data(), nr * m.cols);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n_tokens), int(nr), int(m.cols), 1.0f, x, int(m.cols),
                tile.data(), int(m.cols), 0.0f, y + r0, int(m.rows));
  });
}

}  // namespace

#if BONSAI_CPU_AVX2
bool avx512_usable() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return avx2_usable() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512vbmi2");
  }();
  return ok;
}

bool avx2_usable() {
  static const bool ok = [] {
    __builtin_cpu_init();
    // F16C from CPUID (leaf 1, ECX bit 29): clang before 15 has no "f16c" for
    // __builtin_cpu_supports, and the fuzz build (BONSAI_FUZZ) uses clang.
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }();
  return ok;
}
#endif

namespace {

void ref_rows(const Matrix& m, const float* x, int64_t n_tokens, float* y) {
  thread_local std::vector<float> row;  // each thread's decoded row, kept for the next call
  parallel_for(m.rows, m.rows * m.cols * n_tokens >= kParallelWork, [&](int64_t r) {
    row.resize(size_t(m.cols));
    m.type->to_float(m.data + uint64_t(r) * m.row_bytes, row.data(), m.cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * m.cols;
      double s = 0.0;
      for (int64_t k = 0; k < m.cols; ++k) s += double(row[size_t(k)]) * double(xt[k]);
      y[t * m.rows + r] = float(s);
    }
  });
}

// The AVX2 path's copy of Q8_0 and PTQ1_0 weights (pack_weights): their rows split into scales
// and codes (avx2::split_rows), PTQ1_0's as PQ2_0 blocks of the same values, 34 bytes per 28.
// The 64 bytes past the rows are there for the size alone: it tells this copy from the AVX-512
// path's, which is as large as the weights (a copy is made on one path and may be read on
// another where a test caps the path: cap_matmul_path).
constexpr uint64_t kSplitTagBytes = 64;
TypeId split_type(TypeId t) { return t == TypeId::PTQ1_0 ? TypeId::PQ2_0 : t; }
uint64_t split_copy_bytes(const Tensor& w) {
  if (w.type != TypeId::PTQ1_0 && w.type != TypeId::Q8_0) return 0;
  return w.nbytes / find_type(uint32_t(w.type))->block_bytes * sizeof(block_q8_0) + kSplitTagBytes;
}

// The type whose AVX-512 kernel and copy a weight of type t takes. A TQ2_0 block is two PQ2_0
// blocks of the same values under one scale (both codecs decode code - 1 times d), so TQ2_0 runs on
// PQ2_0's slab kernel from a PQ2_0 copy, 68 bytes for every 66; its own kernel is AVX2's, which on
// the 2-core Intel Xeon computes about half as fast (docs/benchmarks.md, "TQ2_0 on the PQ2_0
// kernel").
TypeId wide_type(TypeId t) { return t == TypeId::TQ2_0 ? TypeId::PQ2_0 : t; }

// w's TQ2_0 blocks as PQ2_0 blocks of the same values, for the AVX-512 kernel's copy (wide_type).
std::vector<uint8_t> tq2_as_pq2(const Tensor& w) {
  using S = CodeView<block_tq2_0>;
  using D = CodeView<block_pq2_0>;
  static_assert(S::kMul == D::kMul && S::kOff == D::kOff && S::kElems == 2 * D::kElems && D::kDigits == 4,
                "a TQ2_0 block is two PQ2_0 blocks of 2-bit codes, each value code - 1 times the scale");
  const int64_t n = int64_t(w.nbytes / sizeof(block_tq2_0));
  std::vector<uint8_t> out(size_t(n) * 2 * sizeof(block_pq2_0));
  parallel_for(n, n * QK_K >= kParallelWork, [&](int64_t i) {
    block_tq2_0 src;
    std::memcpy(&src, w.data + i * int64_t(sizeof src), sizeof src);
    block_pq2_0 dst[2] = {};
    dst[0].d = dst[1].d = src.d;
    for (int j = 0; j < S::kElems; ++j) {
      int sb = 0, sd = 0, db = 0, dd = 0;
      S::place(j, sb, sd);
      D::place(j % D::kElems, db, dd);
      dst[j / D::kElems].qs[db] |= uint8_t(S::digits4(S::bytes(src)[sb], sd) << (2 * dd));
    }
    std::memcpy(out.data() + i * int64_t(sizeof dst), dst, sizeof dst);
  });
  return out;
}

// m, or w's copy where `copy` is the AVX2 split one (read only on that path).
Matrix reading(const Tensor& w, Matrix m, std::span<const uint8_t> copy) {
  if (copy.empty() || copy.size() != split_copy_bytes(w) || matmul_path_taken() != MatmulPath::avx2) return m;
  m.type = find_type(uint32_t(split_type(w.type)));
  m.row_bytes = *row_bytes(m.type->id, uint64_t(m.cols));
  m.data = copy.data();
  m.split = true;
  return m;
}

}  // namespace

void matmul_ref(const Tensor& w, const float* x, int64_t n_tokens, float* y) {
  const Matrix m = check_matrix(w, "matmul");
  check_count(w, "matmul", "token", n_tokens);
  ref_rows(m, x, n_tokens, y);
}

std::span<const uint8_t> pack_weights(const Tensor& w, HugePageArena& pages) {
#if BONSAI_CPU_AVX2
  const Matrix m = check_matrix(w, "pack_weights");
  const MatmulPath path = matmul_path_taken();
  const TypeId wide = wide_type(w.type);
  if (const int64_t bytes = path == MatmulPath::avx512 ? avx512::pack_bytes(wide, m.rows, m.cols) : 0; bytes > 0) {
    uint8_t* out = pages.allocate(size_t(bytes));
    if (wide == w.type) avx512::pack(wide, w.data, m.rows, m.cols, out);
    else avx512::pack(wide, tq2_as_pq2(w).data(), m.rows, m.cols, out);
    return {out, size_t(bytes)};
  }
  if (path == MatmulPath::avx2 && split_copy_bytes(w) > 0) {
    uint8_t* out = pages.allocate(split_copy_bytes(w));
    avx2::split_rows(w.type, w.data, m.rows, m.cols, out);
    std::memset(out + split_copy_bytes(w) - kSplitTagBytes, 0, kSplitTagBytes);
    return {out, size_t(split_copy_bytes(w))};
  }
#else
  (void)w, (void)pages;
#endif
  return {};
}

uint64_t bytes_read(const Tensor& w, std::span<const uint8_t> packed) {
  if (packed.empty()) return w.nbytes;
  const bool split = matmul_path_taken() == MatmulPath::avx2 && packed.size() == split_copy_bytes(w);
  return split ? packed.size() - kSplitTagBytes : packed.size();
}

namespace {

#if BONSAI_CPU_AVX2
// x quantized for an int8 kernel (AVX2's quantize_act), in a buffer of this thread's that the
// next call reuses: no allocation per token once warm.
const QuantAct& quantized(const ActLayout& layout, const float* x, int64_t cols, int64_t n_tokens) {
  thread_local QuantAct act;
  act.reset(layout, cols, n_tokens);
  avx2::quantize_act(act.elem.data(), act.qk, act.offset, x, cols, n_tokens, act.q.data(), act.d.data(),
                     act.corr.data());
  return act;
}

avx2::ActView view_of(const QuantAct& a) { return {a.q.data(), a.d.data(), a.corr.data(), a.cols, a.n_tokens}; }
#endif

// Whether the AVX-512 kernels multiply w (a well-formed matrix) given `copy`: the path taken, a
// type they take (wide_type) at w's width, and their copy of w. Without it (no copy, or not the
// kernel's) the stored blocks go to the AVX2 kernel.
bool wide_takes(const Tensor& w, std::span<const uint8_t> copy) {
#if BONSAI_CPU_AVX2
  const TypeId type = wide_type(w.type);
  return matmul_path_taken() == MatmulPath::avx512 && act_layout_avx512(type) &&
         avx512::pack_bytes(type, 1, w.ne[0]) > 0 && copy.size() == size_t(avx512::pack_bytes(type, w.ne[1], w.ne[0]));
#else
  (void)w, (void)copy;
  return false;
#endif
}

// The products of weights of one kernel type (wide_type) and width with the same activations, on
// the AVX-512 kernels: the activations quantized once, one pass of the threads over all rows.
// False (nothing done) where those kernels do not take them all (wide_takes).
bool matmul_wide(const Tensor* const* w, float* const* y, int count, const Matrix& m, const float* x, int64_t n_tokens,
                 const std::span<const uint8_t>* packed) {
#if BONSAI_CPU_AVX2
  const TypeId type = wide_type(w[0]->type);
  thread_local std::vector<avx512::Part> parts;  // reused across calls: no allocation once warm
  parts.clear();
  for (int i = 0; i < count; ++i) {
    const std::span<const uint8_t> copy = packed ? packed[i] : std::span<const uint8_t>();
    if (wide_type(w[i]->type) != type || !wide_takes(*w[i], copy)) return false;
    parts.push_back({copy.data(), w[i]->ne[1], y[i]});
  }
  const int64_t scratch = avx512::scratch_bytes(type, m.cols, n_tokens);
  const QuantAct& act = quantized(*act_layout_avx512(type), x, m.cols, n_tokens);
  // Cache-line aligned, as matmul_q8 wants: a 64-byte load that straddles two lines runs at half speed.
  struct alignas(64) Line {
    int8_t b[64];
  };
  thread_local std::vector<Line> reordered;
  reordered.resize(size_t((scratch + 63) / 64));
  auto* s = reinterpret_cast<int8_t*>(reordered.data());  // none for PTQ1_0 (its tables are each thread's)
  avx512::matmul_q8(type, parts.data(), count, m.cols, view_of(act), s);
  return true;
#else
  (void)w, (void)y, (void)count, (void)m, (void)x, (void)n_tokens, (void)packed;
  return false;
#endif
}

// One product on the AVX2 kernels, float kernels or the reference, whichever this CPU and type take.
void matmul_one(const Matrix& m, const float* x, int64_t n_tokens, float* y) {
  const TypeId type = m.type->id;
  if (n_tokens >= kGemmTokens && float_weights(type)) return matmul_gemm(m, x, n_tokens, y);
#if BONSAI_CPU_AVX2
  if (matmul_path_taken() >= MatmulPath::avx2) {
    if (const ActLayout* layout = act_layout(type)) {
      if (avx2::matmul_q8(type, m.split, m.data, m.rows, m.cols, view_of(quantized(*layout, x, m.cols, n_tokens)), y)) return;
    } else if (avx2::matmul_float(type, m.data, m.rows, m.cols, x, n_tokens, y)) {
      return;
    }
  }
#endif
  ref_rows(m, x, n_tokens, y);
}

}  // namespace

void matmul_shared(const Tensor* const* w, float* const* y, int count, const float* x, int64_t n_tokens,
                   const std::span<const uint8_t>* packed) {
  if (count <= 0) return;
  const Matrix m = check_matrix(*w[0], "matmul");
  check_count(*w[0], "matmul", "token", n_tokens);
  for (int i = 1; i < count; ++i)
    if (const Matrix mi = check_matrix(*w[i], "matmul"); mi.cols != m.cols)
      fail(w[i]->name, "matmul: ", mi.cols, " columns, but it shares its input with ", w[0]->name, " of ", m.cols);
  if (n_tokens == 0) return;
  if (matmul_wide(w, y, count, m, x, n_tokens, packed)) return;
  for (int i = 0; i < count; ++i)
    if (w[i]->ne[1] > 0)
      matmul_one(reading(*w[i], check_matrix(*w[i], "matmul"), packed ? packed[i] : std::span<const uint8_t>()), x,
                 n_tokens, y[i]);
}

const ActLayout* act_layout_taken(const Tensor& w, std::span<const uint8_t> packed) {
  const Matrix m = check_matrix(w, "matmul");
  if (wide_takes(w, packed)) return act_layout_avx512(wide_type(w.type));
  return matmul_path_taken() == MatmulPath::scalar ? nullptr : act_layout(reading(w, m, packed).type->id);
}

void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y, std::span<const uint8_t> packed) {
  const Tensor* one = &w;
  matmul_shared(&one, &y, 1, x, n_tokens, &packed);
}

void get_rows(const Tensor& w, const int32_t* ids, int64_t n, float* out) {
  const Matrix m = check_matrix(w, "get_rows");
  check_count(w, "get_rows", "row", n);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= m.rows) fail(w.name, "get_rows: row id ", ids[i], " outside [0, ", m.rows, ")");
  for (int64_t i = 0; i < n; ++i)
    m.type->to_float(w.data + uint64_t(ids[i]) * m.row_bytes, out + i * m.cols, m.cols);
}

MatmulPath matmul_path_taken() {
  MatmulPath best = MatmulPath::scalar;
#if BONSAI_CPU_AVX2
  if (avx512_usable()) best = MatmulPath::avx512;
  else if (avx2_usable()) best = MatmulPath::avx2;
#endif
  return std::min(best, path_cap.load(std::memory_order_relaxed));
}

MatmulPath cap_matmul_path(MatmulPath cap) { return path_cap.exchange(cap); }

const char* matmul_path() {
  switch (matmul_path_taken()) {
    case MatmulPath::avx512: return "avx512";
    case MatmulPath::avx2: return "avx2";
    default: return "scalar";
  }
}

}  // namespace bonsai::cpu
