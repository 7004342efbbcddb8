// The block-by-block runner on stories260K (5 blocks, tiny): its statistics equal those a full
// forward observes, the groups of each block are quantized in order, and each later input is
// computed with the weights the callback put in (true-sequential calibration).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "calibrate/runner.h"
#include "formats/error.h"
#include "runtime/transformer.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::calib;

namespace {

const char* kModel = "models/stories260K/stories260K.gguf";

std::vector<int32_t> windows_of(int64_t n, int64_t len, int64_t vocab) {
  std::vector<int32_t> w(size_t(n * len));
  for (size_t i = 0; i < w.size(); ++i) w[i] = int32_t((i * 7919 + 13) % size_t(vocab));
  return w;
}

// Statistics a plain Session observes over full forwards of each window (fresh positions).
Stats observed(const Model& m, const std::vector<int32_t>& windows, int64_t n, int64_t len, bool gram) {
  auto be = make_backend("cpu", 0);
  Session s(m, *be, len, len);
  Stats out;
  s.set_observer([&](const Tensor& w, const float* x, int64_t rows) {
    if (input_key(w.name) != w.name || w.name.rfind("blk.", 0) != 0) return;
    InputStats& st = out.by_weight[w.name];
    if (st.cols == 0) {
      st.cols = w.ne[0];
      if (gram) st.gram.assign(size_t(st.cols * st.cols), 0.0);
    }
    st.add(x, rows);
  });
  for (int64_t i = 0; i < n; ++i) {
    s.reset();
    s.eval(windows.data() + i * len, len, len, nullptr);
  }
  return out;
}

void expect_close(const Stats& a, const Stats& b) {
  ASSERT_EQ(a.by_weight.size(), b.by_weight.size());
  for (const auto& [name, sa] : a.by_weight) {
    const InputStats& sb = b.by_weight.at(name);
    EXPECT_EQ(sa.rows_seen, sb.rows_seen) << name;
    ASSERT_EQ(sa.sum_sq.size(), sb.sum_sq.size()) << name;
    for (size_t i = 0; i < sa.sum_sq.size(); ++i) EXPECT_NEAR(sa.sum_sq[i], sb.sum_sq[i], 1e-5 * (1 + sb.sum_sq[i])) << name;
    ASSERT_EQ(sa.gram.size(), sb.gram.size()) << name;
    for (size_t i = 0; i < sa.gram.size(); ++i) EXPECT_NEAR(sa.gram[i], sb.gram[i], 1e-4 * (1 + std::fabs(sb.gram[i]))) << name;
  }
}

}  // namespace

TEST(Runner, StatisticsEqualAFullForwardAndBlocksComeInOrder) {
  BONSAI_REQUIRE_SHARED(kModel);
  auto m = load_model(test::shared_file(kModel).string());
  const int64_t n = 3, len = 32;
  const auto windows = windows_of(n, len, m->cfg.n_vocab);
  std::vector<std::string> order;
  std::vector<int64_t> progress;
  const int64_t runs0 = block_runs();
  CalibrateOptions o;
  o.gram = true;
  const Stats got = calibrate_blocks(
      *m, windows, n, len, o,
      [&](int64_t l, const std::string& input, const Stats& s) {
        order.push_back(input);
        // The group's input is measured before it is quantized; the next group's is not yet.
        const std::string p = "blk." + std::to_string(l) + ".";
        const std::vector<std::string> inputs = {p + "attn_q.weight", p + "attn_output.weight", p + "ffn_gate.weight",
                                                 p + "ffn_down.weight"};
        const auto at = std::find(inputs.begin(), inputs.end(), input);
        ASSERT_NE(at, inputs.end()) << input;
        EXPECT_TRUE(s.by_weight.count(input)) << input;
        if (at + 1 != inputs.end()) {
          EXPECT_FALSE(s.by_weight.count(*(at + 1))) << *(at + 1);
        }
        EXPECT_FALSE(s.by_weight.count(p + "attn_k.weight"));
      },
      [&](const BlockDone& b) {
        progress.push_back(b.block);
        EXPECT_EQ(b.n_blocks, m->cfg.n_layer);
        EXPECT_GT(b.peak_rss_bytes, 0);
      });
  std::vector<std::string> want_order;
  for (int64_t l = 0; l < m->cfg.n_layer; ++l)
    for (const char* w : {"attn_q", "attn_output", "ffn_gate", "ffn_down"})
      want_order.push_back("blk." + std::to_string(l) + "." + w + ".weight");
  EXPECT_EQ(order, want_order);
  EXPECT_EQ(progress, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(block_runs() - runs0, n * m->cfg.n_layer);  // each window passes through each block once
  EXPECT_EQ(got.by_weight.size(), size_t(4 * m->cfg.n_layer));
  EXPECT_EQ(got.by_weight.at("blk.2.ffn_down.weight").cols, m->cfg.n_ff);
  EXPECT_EQ(got.by_weight.at("blk.2.ffn_down.weight").rows_seen, n * len);
  expect_close(got, observed(*m, windows, n, len, true));
}

TEST(Runner, AdvancesWithTheWeightsTheCallbackPutIn) {
  BONSAI_REQUIRE_SHARED(kModel);
  // Zeroing a block's output projections makes it the identity on the residual stream.
  auto zero_outputs = [](Model& m, int64_t l, std::vector<Tensor>& keep, std::vector<float>& zeros) {
    LayerWeights& w = m.layers[size_t(l)];
    for (const Tensor** slot : {&w.wo, &w.down}) {
      Tensor t = **slot;
      t.type = TypeId::F32;
      t.nbytes = uint64_t(t.nelements()) * 4;
      if (zeros.size() < size_t(t.nelements())) throw std::runtime_error("zeros too small");
      t.data = reinterpret_cast<const uint8_t*>(zeros.data());
      keep.push_back(t);
    }
    w.wo = &keep[keep.size() - 2];
    w.down = &keep[keep.size() - 1];
  };
  auto m = load_model(test::shared_file(kModel).string());
  auto ref = load_model(test::shared_file(kModel).string());
  std::vector<Tensor> keep_m, keep_ref;
  keep_m.reserve(4);
  keep_ref.reserve(4);
  std::vector<float> zeros(size_t(1) << 20, 0.0f);  // sized once: the tensors point into it
  zero_outputs(*ref, 1, keep_ref, zeros);
  const int64_t n = 2, len = 16;
  const auto windows = windows_of(n, len, m->cfg.n_vocab);
  const Stats got = calibrate_blocks(*m, windows, n, len, {}, [&](int64_t l, const std::string& input, const Stats&) {
    if (l == 1 && input == "blk.1.attn_output.weight") zero_outputs(*m, 1, keep_m, zeros);
  });
  const Stats want = observed(*ref, windows, n, len, false);
  // Block 0 and block 1's first two inputs were measured before the change; block 1's
  // feed-forward inputs (true-sequential: after its output projection was replaced) and blocks
  // 2.. see the zeroed projections, like `ref`.
  Stats got_late, want_late;
  for (const auto& [k, v] : got.by_weight)
    if (k.rfind("blk.0.", 0) != 0 && k != "blk.1.attn_q.weight" && k != "blk.1.attn_output.weight")
      got_late.by_weight[k] = v, want_late.by_weight[k] = want.by_weight.at(k);
  EXPECT_EQ(got_late.by_weight.size(), 14u);
  expect_close(got_late, want_late);
  // ... and differ from the unmodified model's (the test would pass vacuously otherwise).
  auto plain = load_model(test::shared_file(kModel).string());
  const Stats orig = observed(*plain, windows, n, len, false);
  const auto& a = got.by_weight.at("blk.3.attn_q.weight").sum_sq;
  const auto& b = orig.by_weight.at("blk.3.attn_q.weight").sum_sq;
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::fabs(a[i] - b[i]);
  EXPECT_GT(diff, 1e-3);
}

// With KeepGram::group each Gram matrix lives until its group is quantized: the callback still sees
// it, memory holds one block's, and the statistics returned keep E[x²] only.
TEST(Runner, DropsGramMatricesOnceTheirGroupIsQuantized) {
  BONSAI_REQUIRE_SHARED(kModel);
  auto m = load_model(test::shared_file(kModel).string());
  const int64_t n = 2, len = 16;
  const auto windows = windows_of(n, len, m->cfg.n_vocab);
  CalibrateOptions o;
  o.gram = true;
  o.keep_gram = KeepGram::group;
  int64_t seen = 0;
  const Stats got = calibrate_blocks(*m, windows, n, len, o, [&](int64_t, const std::string& input, const Stats& s) {
    const InputStats& st = s.by_weight.at(input);
    EXPECT_EQ(st.gram.size(), size_t(st.cols * st.cols)) << input;
    for (const auto& [name, other] : s.by_weight) {
      if (name != input) {
        EXPECT_TRUE(other.gram.empty()) << name << " kept while quantizing " << input;
      }
    }
    ++seen;
  });
  EXPECT_EQ(seen, 4 * m->cfg.n_layer);
  for (const auto& [name, st] : got.by_weight) {
    EXPECT_TRUE(st.gram.empty()) << name;
    EXPECT_EQ(st.sum_sq.size(), size_t(st.cols)) << name;
  }
}

TEST(Runner, RejectsBadWindows) {
  BONSAI_REQUIRE_SHARED(kModel);
  auto m = load_model(test::shared_file(kModel).string());
  std::vector<int32_t> w(10, 1);
  EXPECT_THROW(calibrate_blocks(*m, w, 3, 4, {}, {}), Error);
  w[3] = 100000;
  EXPECT_THROW(calibrate_blocks(*m, w, 2, 5, {}, {}), Error);
}
