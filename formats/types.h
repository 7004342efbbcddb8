// The one table of tensor element types (as ggml's type traits): every reader, writer, codec,
// kernel and CLI path asks this table, never a switch of its own.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace bonsai {

// GGUF / ggml type ids (shared/specs/formats.md §1.0).
enum class TypeId : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q8_0 = 8,
  I8 = 24,  // integers (bonsai's residual index streams: bytes, docs/formats/bonsai.md §9)
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  Q1_0 = 41,
  Q2_0 = 42,
  PQ2_0 = 142,
  PTQ1_0 = 143,
};

struct TypeTraits {
  TypeId id;
  const char* name;  // as the spec spells it: "PTQ1_0"
  int block_elems;   // QK
  int block_bytes;
  bool quantized;
  // Reference (scalar) codecs over n elements, n a multiple of block_elems. Encoders are
  // bit-exact with upstream's reference quantizers (golden vectors).
  void (*to_float)(const void* src, float* dst, int64_t n);
  void (*from_float)(const float* src, void* dst, int64_t n);

  double bits_per_weight() const { return 8.0 * block_bytes / block_elems; }
};

// All known types, in id order.
std::span<const TypeTraits> all_types();
// nullptr when the id is not one this project knows.
const TypeTraits* find_type(uint32_t id);
// Case-insensitive ("q8_0", "PTQ1_0"); nullptr when unknown.
const TypeTraits* find_type(std::string_view name);
const TypeTraits& traits(TypeId id);

// Bytes of a row of ne0 elements; nullopt when ne0 is not a whole number of blocks.
std::optional<uint64_t> row_bytes(TypeId id, uint64_t ne0);
// Bytes of a tensor with the given ggml shape (ne[0] innermost); nullopt when ne[0] is not a
// multiple of the block size or the size overflows 64 bits.
std::optional<uint64_t> tensor_bytes(TypeId id, std::span<const int64_t> ne);

// Packing of chosen codes (used by the calibrated quantizers, and by the reference encoders):
// values[i] in {-1, 0, +1} for the base-3 types, {-1, 0, +1, +2} for the 2-bit types, the
// stored scale d given as fp16 bits.
void pack_ptq1_0(const int8_t* values, uint16_t d, void* block);
void pack_tq1_0(const int8_t* values, uint16_t d, void* block);
void pack_pq2_0(const int8_t* values, uint16_t d, void* block);
void pack_tq2_0(const int8_t* values, uint16_t d, void* block);

}  // namespace bonsai
