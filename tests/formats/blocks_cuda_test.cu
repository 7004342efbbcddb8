// formats/blocks.h compiled by nvcc: the block layouts and decoders the CUDA backend uses are the
// same definitions as the CPU's. With a GPU, every block type is decoded on the device and must
// equal the host decode bit for bit; without one the test reports "skipped" (exit 77).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "formats/blocks.h"
#include "formats/types.h"

using namespace bonsai;

template <typename Block, int QK>
__global__ void decode_kernel(const Block* blocks, float* out, int n_blocks) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n_blocks) decode_block(blocks[i], out + size_t(i) * QK);
}

template <typename Block, int QK>
int check(TypeId id) {
  const TypeTraits& t = traits(id);
  static_assert(sizeof(Block) > 0, "layout");
  if (int(sizeof(Block)) != t.block_bytes || QK != t.block_elems) {
    std::printf("%s: layout differs from the type table\n", t.name);
    return 1;
  }
  const int n_blocks = 64;
  std::vector<float> x(size_t(n_blocks) * QK);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 0.05f);
  for (auto& v : x) v = nd(rng);
  std::vector<uint8_t> bytes(size_t(n_blocks) * sizeof(Block));
  t.from_float(x.data(), bytes.data(), int64_t(x.size()));
  std::vector<float> host(x.size()), dev(x.size());
  t.to_float(bytes.data(), host.data(), int64_t(x.size()));

  Block* d_blocks = nullptr;
  float* d_out = nullptr;
  cudaMalloc(&d_blocks, bytes.size());
  cudaMalloc(&d_out, dev.size() * sizeof(float));
  cudaMemcpy(d_blocks, bytes.data(), bytes.size(), cudaMemcpyHostToDevice);
  decode_kernel<Block, QK><<<1, n_blocks>>>(d_blocks, d_out, n_blocks);
  cudaMemcpy(dev.data(), d_out, dev.size() * sizeof(float), cudaMemcpyDeviceToHost);
  const cudaError_t err = cudaGetLastError();
  cudaFree(d_blocks);
  cudaFree(d_out);
  if (err != cudaSuccess) {
    std::printf("%s: CUDA error %s\n", t.name, cudaGetErrorString(err));
    return 1;
  }
  if (std::memcmp(host.data(), dev.data(), host.size() * sizeof(float)) != 0) {
    std::printf("%s: device decode differs from host decode\n", t.name);
    return 1;
  }
  std::printf("%s: device decode == host decode (%d blocks)\n", t.name, n_blocks);
  return 0;
}

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device: skipped (the layouts compiled with nvcc)\n");
    return 77;
  }
  int bad = 0;
  bad += check<block_q8_0, QK8_0>(TypeId::Q8_0);
  bad += check<block_q4_0, QK4_0>(TypeId::Q4_0);
  bad += check<block_tq1_0, QK_K>(TypeId::TQ1_0);
  bad += check<block_tq2_0, QK_K>(TypeId::TQ2_0);
  bad += check<block_q1_0, QK1_0>(TypeId::Q1_0);
  bad += check<block_q2_0, QK2_0>(TypeId::Q2_0);
  bad += check<block_pq2_0, QK_PQ2_0>(TypeId::PQ2_0);
  bad += check<block_ptq1_0, QK_PTQ1_0>(TypeId::PTQ1_0);
  return bad ? 1 : 0;
}
