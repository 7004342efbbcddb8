// bonsai bench's yardstick: each repetition's generation is judged against the bandwidth probed
// just before and just after it, not against one probe taken at another moment; the warm-up rep
// probes too (untimed), so that the first timed rep runs after a probe like the others. A backend
// that computes on the CPU but reports scripted bandwidths shows which probe each figure used.
#include <gtest/gtest.h>

#include <map>

#include "runtime/backend.h"
#include "runtime/backend_profile.h"
#include "runtime/bench.h"
#include "runtime/cpu/matmul.h"
#include "runtime/load.h"
#include "runtime/synth.h"
#include "support.h"

using namespace bonsai;

namespace {

// Owns the CPU backend that a ForwardingBackend below passes its calls to (a base listed first,
// so that it is built before the ForwardingBackend takes it).
struct OwnsCpu {
  std::unique_ptr<Backend> cpu = make_backend("cpu", 1);
};

// The CPU backend, except that measure_bandwidth_gbs returns the scripted values in turn.
class ScriptedBandwidth : private OwnsCpu, public ForwardingBackend {
 public:
  explicit ScriptedBandwidth(std::vector<double> probes) : ForwardingBackend(*cpu), probes_(std::move(probes)) {}
  int probes_taken() const { return next_; }
  double measure_bandwidth_gbs() override { return probes_.at(size_t(next_++)); }

 private:
  std::vector<double> probes_;
  int next_ = 0;
};

// The CPU backend under the name of a GPU.
class NamedCuda : private OwnsCpu, public ForwardingBackend {
 public:
  NamedCuda() : ForwardingBackend(*cpu) {}
  std::string name() const override { return "cuda:0"; }
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
// AVX2 path the CPU reads PTQ1_0 as PQ2_0 codes (34 bytes per 28); on the AVX-512 path as codes for
// table lookups (30 bytes per 28, rows padded to groups of 128); on the scalar path what is stored.
TEST(Bench, ReportsTheBytesTheKernelsReadBesideTheStoredOnes) {
  const auto m = tiny_model(TypeId::PTQ1_0);
  auto be = make_backend("cpu", 1);
  const BenchResult r = bench(*m, *be, short_run(2, 1));
  const cpu::MatmulPath path = cpu::matmul_path_taken();
  uint64_t ptq1 = 0, more = 0;  // PTQ1_0's stored bytes, and what its copies add
  for (const LayerWeights& l : m->layers)
    for (const Tensor* t : {l.wq, l.wk, l.wv, l.wo, l.gate, l.up, l.down}) {
      if (t->type != TypeId::PTQ1_0) continue;
      ptq1 += t->nbytes;
      const uint64_t blocks = uint64_t(t->ne[0] / 128), rows = uint64_t(t->ne[1]);
      if (path == cpu::MatmulPath::avx2) more += t->nbytes / 28 * 6;
      if (path == cpu::MatmulPath::avx512) more += (rows + 127) / 128 * 128 * blocks * 30 - t->nbytes;
    }
  ASSERT_GT(ptq1, 0u) << "the tiny model's block matrices are PTQ1_0";
  EXPECT_EQ(r.bytes_per_token, weight_bytes_per_token(*m));
  EXPECT_EQ(r.read_bytes_per_token, r.bytes_per_token + more);
}

// --profile: every backend call of the timed generations, and only those, lands in an entry per
// operation; the products' entries name their weights, type and shape and count one call per layer
// and token; the entries' time is part of the tokens' time, never more.
TEST(Bench, ProfileTimesEveryCallOfTheTimedGenerations) {
  const auto m = tiny_model(TypeId::PTQ1_0);
  auto be = make_backend("cpu", 1);
  BenchOptions o = short_run(3, 2);
  o.profile = true;
  const BenchResult r = bench(*m, *be, o);
  EXPECT_EQ(r.profiled_tokens, 6);
  const int64_t layers = int64_t(m->layers.size());
  std::map<std::string, OpTime> by_op;
  double inside = 0;
  for (const OpTime& t : r.profile) {
    by_op[t.op] = t;
    inside += t.seconds;
  }
  const std::string qkv = "matmul attn_q+attn_k+attn_v (PTQ1_0, " + std::to_string(m->cfg.n_embd) + " x " +
                          std::to_string(m->layers[0].wq->ne[1] + 2 * m->layers[0].wk->ne[1]) + ")";
  ASSERT_TRUE(by_op.count(qkv)) << "no entry " << qkv;
  EXPECT_EQ(by_op[qkv].calls, layers * 6);
  const LayerWeights& l0 = m->layers[0];
  EXPECT_EQ(by_op[qkv].bytes, uint64_t(layers * 6) * (be->read_bytes(*l0.wq) + be->read_bytes(*l0.wk) +
                                                      be->read_bytes(*l0.wv)));
  ASSERT_TRUE(by_op.count("attention"));
  EXPECT_EQ(by_op["attention"].calls, layers * 6);
  for (const OpTime& t : r.profile) EXPECT_GE(t.seconds, 0) << t.op;
  EXPECT_LE(inside, r.profiled_seconds);
  for (size_t i = 1; i < r.profile.size(); ++i) EXPECT_GE(r.profile[i - 1].seconds, r.profile[i].seconds);

  const BenchResult plain = bench(*m, *be, short_run(3, 2));
  EXPECT_TRUE(plain.profile.empty());
  EXPECT_EQ(plain.profiled_tokens, 0);
}

// A GPU's calls return before they have run: timing them would measure the queueing.
TEST(Bench, ProfileRefusesABackendThatQueuesItsCalls) {
  const auto m = tiny_model(TypeId::Q8_0);
  NamedCuda be;
  BenchOptions o = short_run(2, 1);
  o.profile = true;
  const std::string msg = test::error_of([&] { bench(*m, be, o); });
  EXPECT_NE(msg.find("--profile"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
}
