// Residual codebooks (bonsai's stage-2 extension, docs/formats/bonsai.md §9): tensors linked to a
// base matrix W (ne = [cols, rows]) that add R̂ to it, W·x = Ŵ_base·x + R̂·x.
//
//   kmeans:  <base>.rc_codebook  F16 [dim, size, books]  books codebooks of `size` centroids of
//                                                         `dim` consecutive inputs; codebook b
//                                                         serves rows [b·rows/books, (b+1)·rows/books)
//            <base>.rc_index     I8  [row_bytes, rows]    per row, cols/dim indices of
//                                                         index_bits(size) bits, LSB first
//   pattern: <base>.rc_codebook  F16 [128, 4, 1]         4 patterns of a whole 128-group
//            <base>.rc_index     I8  [row_bytes, rows]    per row, cols/128 2-bit indices
//            <base>.group_params F16 [2, cols/128, rows]  per group (μ, σ): R̂ = μ + σ·pattern
//
// This header knows bytes only: the view checks every shape, type and index against the base
// (named errors) and decodes; ResidualData makes the tensors (quantize/ fits their contents,
// runtime/synth draws them at random), runtime/ computes with them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/tensor_set.h"

namespace bonsai {

enum class ResidualScheme { kmeans, pattern };
const char* residual_scheme_name(ResidualScheme s);

constexpr const char* kRcCodebookSuffix = ".rc_codebook";
constexpr const char* kRcIndexSuffix = ".rc_index";
constexpr const char* kRcParamsSuffix = ".group_params";
constexpr int64_t kRcGroup = 128;  // a sub-vector never crosses a group of 128 inputs

// Bits of one index into a codebook of `size` centroids: ceil(log2 size), at least 1.
int index_bits(int64_t size);
// Bytes of one row of n indices of `bits` bits (rows start on a byte).
uint64_t index_row_bytes(int64_t n, int bits);
// Packs n indices (each < 2^bits) LSB first.
void pack_indices(const uint32_t* idx, int64_t n, int bits, uint8_t* row);
inline uint32_t index_at(const uint8_t* row, int64_t i, int bits) {
  const uint64_t bit = uint64_t(i) * uint64_t(bits);
  uint32_t v = 0;
  for (int k = 0; k < bits; ++k) v |= uint32_t((row[(bit + uint64_t(k)) >> 3] >> ((bit + uint64_t(k)) & 7)) & 1u) << k;
  return v;
}

// The kmeans scheme's options (--rc-dim v, --rc-size K, --rc-rows G; G = 0: all rows of each
// tensor) checked on their own: the first problem, naming the option, or empty when they are fine.
std::string kmeans_options_problem(int64_t dim, int64_t size, int64_t rows_per_codebook);

// What a writer stores for one base matrix, before it becomes tensors.
struct ResidualData {
  ResidualScheme scheme = ResidualScheme::kmeans;
  int64_t dim = 0, size = 0, books = 0;
  std::vector<uint16_t> codebook;  // fp16 [books][size][dim]
  std::vector<uint8_t> index;      // rows × row_bytes
  std::vector<uint16_t> params;    // pattern: fp16 [rows][cols/128][2]

  // The tensors <base>.rc_codebook, <base>.rc_index (and .group_params), their data pointing into
  // this object. Names, types, shapes and sizes follow from scheme, dim, size and books and the
  // base's shape alone, so a streaming writer can put them in its table before the data is made
  // (the data pointers are then null). Error naming the base when a filled array does not hold
  // the bytes its shape needs.
  std::vector<Tensor> view(const Tensor& base) const;
  // The same with the data copied into `owner`.
  std::vector<Tensor> tensors(const Tensor& base, TensorSet& owner) const;
  uint64_t bytes() const;  // codebook + index + params
};

// bonsai.residual.scheme (string), .vector_dim, .codebook_size, .rows_per_codebook (u32; 0 = all
// rows of each tensor): what the file's residual tensors were made with (docs/formats/bonsai.md §9).
// The pattern scheme's fixed shape replaces dim, size and rows.
void write_residual_keys(ResidualScheme s, int64_t dim, int64_t size, int64_t rows_per_codebook, Metadata& meta);

// A validated residual of one base matrix (pointers into the tensors' data).
struct ResidualView {
  ResidualScheme scheme = ResidualScheme::kmeans;
  std::string base;
  int64_t rows = 0, cols = 0;
  int64_t dim = 0, size = 0, books = 0;  // books = codebooks; rows per codebook = rows / books
  int bits = 0;
  uint64_t row_bytes = 0;               // of the index stream
  const uint16_t* codebook = nullptr;   // fp16 [books][size][dim]
  const uint8_t* indices = nullptr;     // rows × row_bytes
  uint64_t index_uid = 0;               // the index tensor's Tensor::uid (what caches key on)
  const uint16_t* params = nullptr;     // pattern: fp16 [rows][cols/128][2] = (μ, σ)

  int64_t rows_per_book() const { return rows / books; }
  uint32_t index(int64_t r, int64_t i) const { return index_at(indices + uint64_t(r) * row_bytes, i, bits); }
  // R̂ as rows × cols floats.
  std::vector<float> dequantize() const;
  uint64_t stored_bytes() const;  // codebook + index + params
};

// The residual of `base` in `ts`, or false when it has none (no <base>.rc_codebook). Errors,
// naming ts.path and the tensor: an index or params tensor without its codebook, a wrong type, a
// shape that does not match the base, a codebook group count that does not divide the base's
// rows, a sub-vector dimension that does not divide 128, an index >= the codebook size,
// a non-finite centroid or parameter.
bool find_residual(const TensorSet& ts, const Tensor& base, ResidualView* out);

}  // namespace bonsai
