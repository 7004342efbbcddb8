// How the CUDA kernels read a weight row of each stored type: one tag type per TypeId, all
// derived from formats/blocks.h (block types through their CodeView, the float types directly),
// and one dispatch from the runtime TypeId to the tag. No layout is described here.
#pragma once
#include <cstdint>

#include "formats/blocks.h"
#include "formats/error.h"
#include "formats/types.h"

namespace bonsai::cuda {

// A quantized type: blocks of kElems elements whose code words the dp4a kernels unpack.
template <typename Block>
struct BlockType {
  using B = Block;
  using View = CodeView<Block>;
  static constexpr bool kQuant = true;
  static constexpr int kElems = View::kElems;
  __device__ static float at(const uint8_t* row, int64_t k) {
    return block_value(reinterpret_cast<const Block*>(row)[k / kElems], int(k % kElems));
  }
};

// A float type: element k of the row.
template <typename T, float (*Load)(T)>
struct FloatType {
  static constexpr bool kQuant = false;
  static constexpr int kElems = 1, kBytes = int(sizeof(T));
  __device__ static float at(const uint8_t* row, int64_t k) { return Load(reinterpret_cast<const T*>(row)[k]); }
};

__host__ __device__ inline float load_f32(float v) { return v; }
__host__ __device__ inline float load_f16(uint16_t v) { return fp16_to_f32(v); }
__host__ __device__ inline float load_bf16(uint16_t v) { return bf16_to_f32(v); }

using F32 = FloatType<float, load_f32>;
using F16 = FloatType<uint16_t, load_f16>;
using BF16 = FloatType<uint16_t, load_bf16>;

// Calls f(tag) with the tag of type t; Error for a type the kernels do not read.
template <typename F>
void with_weight_type(TypeId t, F&& f) {
  switch (t) {
    case TypeId::F32: return f(F32{});
    case TypeId::F16: return f(F16{});
    case TypeId::BF16: return f(BF16{});
    case TypeId::Q8_0: return f(BlockType<block_q8_0>{});
    case TypeId::Q4_0: return f(BlockType<block_q4_0>{});
    case TypeId::Q1_0: return f(BlockType<block_q1_0>{});
    case TypeId::Q2_0: return f(BlockType<block_q2_0>{});
    case TypeId::TQ1_0: return f(BlockType<block_tq1_0>{});
    case TypeId::TQ2_0: return f(BlockType<block_tq2_0>{});
    case TypeId::PQ2_0: return f(BlockType<block_pq2_0>{});
    case TypeId::PTQ1_0: return f(BlockType<block_ptq1_0>{});
    case TypeId::I8: break;  // residual index streams, not weights
  }
  throw Error(cat("the CUDA backend has no kernel for type ", traits(t).name));
}

}  // namespace bonsai::cuda
