// bench_attention: decode attention (one new token over its cached positions) of a Qwen3-1.7B-sized
// decoder, all layers in a row as a decode step runs them, in microseconds per step and in GB/s of
// the K and V bytes read. --cold reads 256 MB of other memory before each step, as a decode step's
// weights evict the cache; without it the cache stays where the last step left it (L2 or L3 if it
// fits), which shows what the arithmetic allows.
//
//   bench_attention [--threads N] [--path avx2|avx512] [--head-dim 128] [--seen 64] [--layers 28]
//                   [--reps 20] [--cold]
//
// Shape otherwise as Qwen3-1.7B: 16 query heads over 8 cache heads (--layers 1 --seen 64 keeps one
// layer's 512 KB in L2).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/cpu/attention.h"
#include "runtime/cpu/huge_pages.h"
#include "runtime/cpu/matmul.h"

using namespace bonsai;

int main(int argc, char** argv) {
  int64_t head_dim = 128, seen = 64, layers = 28, reps = 20;
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto number = [&]() -> int64_t {
      const long long v = i + 1 < argc ? std::atoll(argv[++i]) : 0;
      if (v <= 0) {
        std::fprintf(stderr, "bench_attention: %s needs a positive number\n", a.c_str());
        std::exit(2);
      }
      return v;
    };
    if (a == "--threads") omp_set_num_threads(int(number()));
    else if (a == "--head-dim") head_dim = number();
    else if (a == "--seen") seen = number();
    else if (a == "--layers") layers = number();
    else if (a == "--reps") reps = number();
    else if (a == "--cold") cold = true;
    else if (a == "--path") {
      const std::string p = i + 1 < argc ? argv[++i] : "";
      if (p != "avx2" && p != "avx512") {
        std::fprintf(stderr, "bench_attention: --path is avx2 or avx512, not '%s'\n", p.c_str());
        return 2;
      }
      cpu::cap_matmul_path(p == "avx2" ? cpu::MatmulPath::avx2 : cpu::MatmulPath::avx512);
    } else {
      std::fprintf(stderr, "bench_attention: unknown option %s (see the comment at the top of bench_attention.cpp)\n",
                   a.c_str());
      return 2;
    }
  }
  const int64_t n_head = 16, n_kv = 8, ctx = seen;
  const int64_t cache = n_kv * ctx * head_dim;  // floats of one layer's K (or V)
  cpu::HugePageArena pages;
  std::vector<float*> k, v;
  for (int64_t l = 0; l < layers; ++l)
    for (auto* c : {&k, &v}) {
      float* p = reinterpret_cast<float*>(pages.allocate(size_t(cache) * sizeof(float)));
      for (int64_t i = 0; i < cache; ++i) p[i] = float(i % 13) * 0.01f - 0.06f;
      c->push_back(p);
    }
  std::vector<float> q(size_t(n_head * head_dim), 0.1f), out(q.size());
  std::vector<unsigned char> other(cold ? size_t(256) << 20 : 0, 1);
  std::vector<double> us;
  unsigned sink = 0;
  for (int64_t r = 0; r <= reps; ++r) {  // the first step warms up
    for (size_t i = 0; i < other.size(); i += 64) sink += other[i];
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t l = 0; l < layers; ++l)
      cpu::attention(q.data(), k[size_t(l)], v[size_t(l)], 1, seen - 1, n_head, n_kv, head_dim, ctx, out.data());
    if (r > 0) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  const double mb = 2.0 * double(layers * cache) * sizeof(float) / 1e6;
  std::printf("path %s, %d threads, head_dim %lld, %lld positions, %lld layers (%.2f MB of K and V), %s: "
              "best %.1f us (%.1f GB/s), median %.1f us\n",
              cpu::matmul_path(), omp_get_max_threads(), (long long)head_dim, (long long)seen, (long long)layers, mb,
              cold ? "cold" : "warm", us.front(), mb * 1e3 / us.front(), us[us.size() / 2]);
  volatile unsigned keep = sink;  // the cold reads must not be optimized away
  (void)keep;
}
