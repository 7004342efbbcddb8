// bonsai bench's yardstick: each repetition's generation is judged against the bandwidth probed
// just before and just after it, not against one probe taken at another moment; the warm-up rep
// probes too (untimed), so that the first timed rep runs after a probe like the others. A backend
// that computes on the CPU but reports scripted bandwidths shows which probe each figure used.
#include <gtest/gtest.h>

#include "runtime/backend.h"
#include "runtime/bench.h"
#include "runtime/cpu/matmul.h"
#include "runtime/load.h"
#include "runtime/synth.h"
#include "support.h"

using namespace bonsai;

namespace {

// The CPU backend, except that measure_bandwidth_gbs returns the scripted values in turn.
class ScriptedBandwidth : public Backend {
 public:
  explicit ScriptedBandwidth(std::vector<double> probes) : cpu_(make_backend("cpu", 1)), probes_(std::move(probes)) {}
  int probes_taken() const { return next_; }

  std::string name() const override { return cpu_->name(); }
  float* alloc(int64_t n) override { return cpu_->alloc(n); }
  void to_host(const float* src, float* dst, int64_t n) override { cpu_->to_host(src, dst, n); }
  void embed(const Tensor& t, const int32_t* ids, int64_t n, float* out) override { cpu_->embed(t, ids, n, out); }
  void matmul(const Tensor& w, const float* x, int64_t n, float* y) override { cpu_->matmul(w, x, n, y); }
  void matmul_shared(const Tensor* const* w, float* const* y, int count, const float* x, int64_t n) override {
    cpu_->matmul_shared(w, y, count, x, n);
  }
  void rmsnorm(const float* x, const std::vector<float>& w, int64_t rows, int64_t dim, float eps, float* y) override {
    cpu_->rmsnorm(x, w, rows, dim, eps, y);
  }
  void add_bias(float* y, const std::vector<float>& bias, int64_t rows) override { cpu_->add_bias(y, bias, rows); }
  void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, int64_t n_rot, int64_t pos0, float base,
            bool neox) override {
    cpu_->rope(x, n, heads, head_dim, n_rot, pos0, base, neox);
  }
  void* alloc_kv(int64_t n_ctx, int64_t n_head_kv, int64_t head_dim) override {
    return cpu_->alloc_kv(n_ctx, n_head_kv, head_dim);
  }
  void store_kv(const float* src, void* cache, int64_t row0, int64_t n, int64_t dim) override {
    cpu_->store_kv(src, cache, row0, n, dim);
  }
  void attention(const float* q, const void* k, const void* v, int64_t n, int64_t pos0, int64_t n_head,
                 int64_t n_head_kv, int64_t head_dim, float* out) override {
    cpu_->attention(q, k, v, n, pos0, n_head, n_head_kv, head_dim, out);
  }
  void copy(const float* src, float* dst, int64_t n) override { cpu_->copy(src, dst, n); }
  void add(float* x, const float* y, int64_t n) override { cpu_->add(x, y, n); }
  void silu_mul(float* g, const float* u, int64_t n) override { cpu_->silu_mul(g, u, n); }
  void hadamard(const HadamardSpec& s, float* x, int64_t n, int64_t k, bool inverse) override {
    cpu_->hadamard(s, x, n, k, inverse);
  }
  double measure_bandwidth_gbs() override { return probes_.at(size_t(next_++)); }

 private:
  std::unique_ptr<Backend> cpu_;
  std::vector<double> probes_;
  int next_ = 0;
};

// A synthetic model of the tiny size whose block matrices are of `type`.
auto tiny_model(TypeId type) {
  const std::string path = (test::scratch_dir() / (std::string("bench-tiny-") + traits(type).name + ".gguf")).string();
  SynthOptions so;
  so.size = "tiny";
  so.type = type;
  synth_model(so, path);
  return load_model(path);
}

BenchOptions short_run(int64_t tokens, int reps) {
  BenchOptions o;
  o.n_prompt = tokens;
  o.n_gen = tokens;
  o.reps = reps;
  return o;
}

}  // namespace

TEST(Bench, JudgesEachRepetitionAgainstTheBandwidthProbedAroundIt) {
  const auto m = tiny_model(TypeId::Q8_0);
  ScriptedBandwidth be({1, 2, 10, 30, 100, 60});  // the warm-up's two, then two per timed rep
  const BenchResult r = bench(*m, be, short_run(4, 2));

  ASSERT_EQ(be.probes_taken(), 6) << "one probe before and one after each generation, the warm-up's too";
  ASSERT_EQ(r.reps.size(), 2u);
  const double bytes = double(r.bytes_per_token);
  EXPECT_EQ(r.reps[0].bandwidth_before_gbs, 10);
  EXPECT_EQ(r.reps[0].bandwidth_after_gbs, 30);
  EXPECT_EQ(r.reps[1].bandwidth_before_gbs, 100);
  EXPECT_EQ(r.reps[1].bandwidth_after_gbs, 60);
  EXPECT_DOUBLE_EQ(r.reps[0].roofline_pct, 100 * r.reps[0].tg_tps * bytes / 20e9);
  EXPECT_DOUBLE_EQ(r.reps[1].roofline_pct, 100 * r.reps[1].tg_tps * bytes / 80e9);
  EXPECT_DOUBLE_EQ(r.roofline_pct, (r.reps[0].roofline_pct + r.reps[1].roofline_pct) / 2);
  EXPECT_DOUBLE_EQ(r.tg_tps, (r.reps[0].tg_tps + r.reps[1].tg_tps) / 2);
  EXPECT_DOUBLE_EQ(r.bandwidth_gbs, 50);
  EXPECT_EQ(r.bandwidth_min_gbs, 10);
  EXPECT_EQ(r.bandwidth_max_gbs, 100);
  EXPECT_DOUBLE_EQ(r.roofline_tps, 50e9 / bytes);
  EXPECT_GT(r.reps[0].tg_tps, 0);
  EXPECT_GT(r.pp_tps, 0);
}

// The roofline is the stored format's; the bytes the kernels read are reported beside it. On the
// AVX2 path the CPU reads PTQ1_0 as PQ2_0 codes (34 bytes per 28); elsewhere what is stored.
TEST(Bench, ReportsTheBytesTheKernelsReadBesideTheStoredOnes) {
  const auto m = tiny_model(TypeId::PTQ1_0);
  auto be = make_backend("cpu", 1);
  const BenchResult r = bench(*m, *be, short_run(2, 1));
  uint64_t ptq1 = 0;
  for (const LayerWeights& l : m->layers)
    for (const Tensor* t : {l.wq, l.wk, l.wv, l.wo, l.gate, l.up, l.down})
      if (t->type == TypeId::PTQ1_0) ptq1 += t->nbytes;
  ASSERT_GT(ptq1, 0u) << "the tiny model's block matrices are PTQ1_0";
  EXPECT_EQ(r.bytes_per_token, weight_bytes_per_token(*m));
  const bool pq2_copies = cpu::matmul_path_taken() == cpu::MatmulPath::avx2;
  EXPECT_EQ(r.read_bytes_per_token, r.bytes_per_token + (pq2_copies ? ptq1 / 28 * 6 : 0));
}
