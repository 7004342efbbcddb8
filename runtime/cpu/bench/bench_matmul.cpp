// bench_matmul: matrix-vector throughput of bonsai::cpu::matmul per weight type, in GB/s of weight
// bytes as stored, next to the machine's read bandwidth. Token generation reads every weight once
// per token, so this ratio is the fraction of the memory speed a decode step can reach. (The
// products read the kernels' copies, as the CPU backend does: on the AVX2 path PTQ1_0's is PQ2_0,
// 34 bytes for every 28 counted here.)
//
//   bench_matmul [--threads N] [--types PTQ1_0,Q8_0,...] [--tokens N] [--min-mb MB] [--no-model]
//                [--path scalar|avx2|avx512] [--shape COLSxROWS]...
//   bench_matmul [--threads N] --probe-mb MB,MB,...
//
// --probe-mb only probes the read bandwidth with buffers of those sizes, in turn for three rounds:
// how much faster than memory the caches read a buffer that fits in them (bandwidth.h).
//
// --path caps the kernels at that instruction set (the header line prints the path taken), so
// one machine compares them.
// Each shape (a layer's widest products, then the output matrix) is benchmarked over enough
// distinct copies of the matrix (>= --min-mb, by default the bandwidth probe's buffer: four times
// the last-level cache, at least 256 MB) that the weights come from memory, not from the cache.
// --shape (repeatable) replaces those shapes: with --min-mb 0 a matrix that fits in L2 (2048x1024
// of PTQ1_0 is 459 KB) shows what a kernel computes per core when memory is not in the way, the
// ceiling it could stream at. The model sweep runs the matrices of a Qwen3-1.7B-sized decoder (28
// layers; hidden 2048, 16+8+8 heads of 128, intermediate 6144; no lm_head) as a decode step would:
// 308 MB in PTQ1_0, which a last-level cache as large (the Intel Xeon's L3 is 300 MB) partly holds.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "formats/types.h"
#include "runtime/cpu/bandwidth.h"
#include "runtime/cpu/blas_kernels.h"
#include "runtime/cpu/matmul.h"

using namespace bonsai;

namespace {

struct Shape {
  int64_t cols, rows;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One matrix encoded from random floats (so quantized blocks look like real ones), in `copies`
// separate buffers.
struct Weights {
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<Tensor> tensors;
  std::unique_ptr<cpu::HugePageArena> pages = std::make_unique<cpu::HugePageArena>();
  std::vector<std::span<const uint8_t>> packed;  // cpu::pack_weights of each, as the CPU backend keeps them
};

Weights make_weights(const TypeTraits& tt, Shape s, int copies, std::mt19937& rng) {
  const int64_t ne[2] = {s.cols, s.rows};
  const uint64_t nbytes = *tensor_bytes(tt.id, ne);
  std::vector<float> f(size_t(s.cols * s.rows));
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (auto& v : f) v = nd(rng);
  Weights w;
  w.bufs.resize(size_t(copies));
  w.bufs[0].resize(nbytes);
  tt.from_float(f.data(), w.bufs[0].data(), int64_t(f.size()));
  for (int c = 1; c < copies; ++c) w.bufs[size_t(c)] = w.bufs[0];
  for (int c = 0; c < copies; ++c) {
    Tensor t;
    t.name = std::string("bench.") + tt.name;
    t.type = tt.id;
    t.ne = {s.cols, s.rows};
    t.data = w.bufs[size_t(c)].data();
    t.nbytes = nbytes;
    w.packed.push_back(cpu::pack_weights(t, *w.pages));
    w.tensors.push_back(std::move(t));
  }
  return w;
}

// Times of passes over all tensors (each a matmul of n_tokens), after a warm-up pass; at least
// 5 passes and 1 s. Two summaries: the best pass, and the sum over tensors of each one's best
// call. On a quiet machine they agree; on a shared one a pass often waits for a descheduled
// thread, and the per-call bests show what the kernels do when they get the cores.
struct Timing {
  double best_pass_s, best_calls_s;
};

// A weight with its kernel copy (cpu::pack_weights; empty where its kernel reads the weight itself).
struct Weight {
  const Tensor* t;
  std::span<const uint8_t> packed;
};

Timing time_passes(const std::vector<Weight>& ts, const float* x, int64_t n_tokens, float* y) {
  for (const Weight& w : ts) cpu::matmul(*w.t, x, n_tokens, y, w.packed);
  std::vector<double> best_call(ts.size(), 1e30);
  double best = 1e30, spent = 0;
  for (int pass = 0; pass < 5 || spent < 1.0; ++pass) {
    const double t0 = now_s();
    double prev = t0;
    for (size_t i = 0; i < ts.size(); ++i) {
      cpu::matmul(*ts[i].t, x, n_tokens, y, ts[i].packed);
      const double t = now_s();
      best_call[i] = std::min(best_call[i], t - prev);
      prev = t;
    }
    best = std::min(best, prev - t0);
    spent += prev - t0;
  }
  double calls = 0;
  for (double c : best_call) calls += c;
  return {best, calls};
}

std::vector<const TypeTraits*> parse_types(const std::string& list) {
  std::vector<const TypeTraits*> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string name = list.substr(pos, comma - pos);
    if (!name.empty()) {
      const TypeTraits* t = find_type(name);
      if (!t) {
        std::fprintf(stderr, "bench_matmul: unknown type %s\n", name.c_str());
        std::exit(2);
      }
      out.push_back(t);
    }
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string types = "F32,F16,BF16,Q8_0,Q4_0,Q1_0,Q2_0,TQ1_0,TQ2_0,PQ2_0,PTQ1_0";
  std::string model_types = "PTQ1_0,Q8_0";
  int64_t n_tokens = 1;
  double min_mb = double(cpu::default_probe_bytes()) / 1e6;
  bool model = true;
  std::vector<double> probe_mb;
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_matmul: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") omp_set_num_threads(std::atoi(value().c_str()));
    else if (a == "--types") types = model_types = value();
    else if (a == "--tokens") n_tokens = std::max<int64_t>(1, std::atoll(value().c_str()));
    else if (a == "--min-mb") min_mb = std::atof(value().c_str());
    else if (a == "--no-model") model = false;
    else if (a == "--probe-mb") {
      std::stringstream list(value());
      for (std::string mb; std::getline(list, mb, ',');) {
        char* end = nullptr;
        const double v = std::strtod(mb.c_str(), &end);
        if (mb.empty() || *end != '\0' || !(v >= 1)) {
          std::fprintf(stderr, "bench_matmul: --probe-mb is a list of sizes of at least 1 MB (e.g. 64,256), not '%s'\n",
                       mb.c_str());
          return 2;
        }
        probe_mb.push_back(v);
      }
    }
    else if (a == "--shape") {
      const std::string v = value();
      long long cols = 0, rows = 0;
      char x = 0, extra = 0;
      if (std::sscanf(v.c_str(), "%lld%c%lld%c", &cols, &x, &rows, &extra) != 3 || x != 'x' || cols <= 0 || rows <= 0) {
        std::fprintf(stderr, "bench_matmul: --shape is COLSxROWS (e.g. 2048x1024), not %s\n", v.c_str());
        return 2;
      }
      shapes.push_back({cols, rows});
    }
    else if (a == "--path") {
      const std::string p = value();
      if (p != "scalar" && p != "avx2" && p != "avx512") {
        std::fprintf(stderr, "bench_matmul: --path is scalar, avx2 or avx512, not %s\n", p.c_str());
        return 2;
      }
      cpu::cap_matmul_path(p == "scalar" ? cpu::MatmulPath::scalar
                           : p == "avx2" ? cpu::MatmulPath::avx2
                                         : cpu::MatmulPath::avx512);
    } else {
      std::fprintf(stderr,
                   "usage: bench_matmul [--threads N] [--types A,B] [--tokens N] [--min-mb MB] [--no-model] "
                   "[--path scalar|avx2|avx512] [--shape COLSxROWS]...\n"
                   "       bench_matmul [--threads N] --probe-mb MB,MB,...\n");
      return 2;
    }
  }

  if (!probe_mb.empty()) {
    std::vector<std::unique_ptr<cpu::ReadProbe>> probes;
    for (double mb : probe_mb) probes.push_back(std::make_unique<cpu::ReadProbe>(size_t(mb * 1e6)));
    std::printf("threads %d; read bandwidth in GB/s (best of 5 passes) by buffer size\n", omp_get_max_threads());
    for (int round = 0; round < 3; ++round) {
      for (size_t i = 0; i < probes.size(); ++i) std::printf("%8.0f MB %6.2f", probe_mb[i], probes[i]->measure_gbs());
      std::printf("\n");
      std::fflush(stdout);
    }
    return 0;
  }
  std::printf("threads %d, path %s, tokens %lld, BLAS kernels %s\n", omp_get_max_threads(), cpu::matmul_path(),
              (long long)n_tokens, cpu::blas_kernels());
  std::printf("bw: read bandwidth (%.0f MB, all threads, best of 3) measured just before each row, the\n"
              "yardstick of its %% columns (a shared machine moves both). GB/s: weight bytes / best pass;\n"
              "call-best: weight bytes / sum of each matrix's best call.\n\n",
              double(cpu::default_probe_bytes()) / 1e6);
  std::printf("%-7s %-12s %8s %7s %8s %6s %10s %6s %10s\n", "type", "cols x rows", "MB/copy", "bw", "GB/s", "% bw",
              "call-best", "% bw", "us/matmul");
  cpu::ReadProbe probe;  // one buffer for every row's probe (bandwidth.h)
  auto bandwidth = [&] { return probe.measure_gbs(3); };

  std::mt19937 rng(42);
  // Shapes alone (unless --shape): a layer's widest product both ways, and Qwen3-1.7B's output
  // matrix (lm_head, tied to the embedding: the largest single product of a decode step).
  if (shapes.empty()) shapes = {{2048, 6144}, {6144, 2048}, {2048, 151936}};
  // Qwen3-1.7B decoder layer: q 2048->2048, k,v 2048->1024, o 2048->2048, gate,up 2048->6144,
  // down 6144->2048.
  const Shape layer[] = {{2048, 2048}, {2048, 1024}, {2048, 1024}, {2048, 2048},
                         {2048, 6144}, {2048, 6144}, {6144, 2048}};
  int64_t max_cols = 0, max_rows = 0;  // x and y for the widest of both
  for (const std::span<const Shape> set : {std::span<const Shape>(shapes), std::span<const Shape>(layer)})
    for (const Shape s : set) max_cols = std::max(max_cols, s.cols), max_rows = std::max(max_rows, s.rows);
  std::vector<float> x(size_t(max_cols * n_tokens)), y(size_t(max_rows * n_tokens));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(rng);

  for (const TypeTraits* tt : parse_types(types)) {
    for (const Shape s : shapes) {
      const int64_t ne[2] = {s.cols, s.rows};
      const std::optional<uint64_t> bytes = tensor_bytes(tt->id, ne);
      if (!bytes) {
        std::fprintf(stderr, "bench_matmul: %s cannot hold %lld x %lld (cols must be whole blocks of %lld)\n", tt->name,
                     (long long)s.cols, (long long)s.rows, (long long)tt->block_elems);
        return 2;
      }
      const double mb = double(*bytes) / 1e6;
      const int copies = std::max(1, int(min_mb / mb + 0.999));
      Weights w = make_weights(*tt, s, copies, rng);
      std::vector<Weight> ts;
      for (size_t c = 0; c < w.tensors.size(); ++c) ts.push_back({&w.tensors[c], w.packed[c]});
      const double bw = bandwidth();
      const Timing tm = time_passes(ts, x.data(), n_tokens, y.data());
      const double gbs = mb * 1e6 * copies / tm.best_pass_s / 1e9, cgbs = mb * 1e6 * copies / tm.best_calls_s / 1e9;
      std::printf("%-7s %5lld x %-6lld %8.2f %7.2f %8.2f %5.0f%% %10.2f %5.0f%% %10.1f\n", tt->name, (long long)s.cols,
                  (long long)s.rows, mb, bw, gbs, 100 * gbs / bw, cgbs, 100 * cgbs / bw, tm.best_calls_s / copies * 1e6);
      std::fflush(stdout);
    }
  }

  if (!model) return 0;
  std::printf("\nQwen3-1.7B-sized decode step (28 layers x 7 matrices, no lm_head)\n");
  std::printf("%-7s %9s %7s %8s %6s %10s %6s %9s\n", "type", "MB", "bw", "GB/s", "% bw", "call-best", "% bw", "tokens/s");
  for (const TypeTraits* tt : parse_types(model_types)) {
    std::vector<Weights> ws;
    std::vector<Weight> ts;
    double mb = 0;
    for (const Shape s : layer) ws.push_back(make_weights(*tt, s, 28, rng));
    for (int l = 0; l < 28; ++l)
      for (auto& w : ws) {
        ts.push_back({&w.tensors[size_t(l)], w.packed[size_t(l)]});
        mb += double(w.tensors[size_t(l)].nbytes) / 1e6;
      }
    const double bw = bandwidth();
    const Timing tm = time_passes(ts, x.data(), n_tokens, y.data());
    const double gbs = mb * 1e6 / tm.best_pass_s / 1e9, cgbs = mb * 1e6 / tm.best_calls_s / 1e9;
    std::printf("%-7s %9.1f %7.2f %8.2f %5.0f%% %10.2f %5.0f%% %9.2f\n", tt->name, mb, bw, gbs, 100 * gbs / bw, cgbs,
                100 * cgbs / bw, double(n_tokens) / tm.best_pass_s);
    std::fflush(stdout);
  }
  return 0;
}
