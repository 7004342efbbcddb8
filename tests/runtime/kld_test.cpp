// KL divergence against a saved base (runtime/kld.h): the every-token layout within its stated
// rounding bound of the exact KLD, the top-k layout exact when k covers the vocabulary and a lower
// bound otherwise, 0 for identical models; the paired perplexity difference against a direct
// computation; the file round-trips and bad files are named errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <vector>

#include "formats/error.h"
#include "runtime/cpu/ops.h"
#include "runtime/kld.h"
#include "support.h"

using namespace bonsai;

namespace {

std::vector<float> random_logits(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

// The full KLD in double, straight from the definition.
double full_kld(const std::vector<float>& p_logits, const std::vector<float>& q_logits) {
  auto logsm = [](const std::vector<float>& l) {
    double mx = l[0];
    for (float x : l) mx = std::max(mx, double(x));
    double s = 0;
    for (float x : l) s += std::exp(double(x) - mx);
    std::vector<double> r;
    for (float x : l) r.push_back(double(x) - mx - std::log(s));
    return r;
  };
  const auto lp = logsm(p_logits), lq = logsm(q_logits);
  double k = 0;
  for (size_t i = 0; i < lp.size(); ++i) k += std::exp(lp[i]) * (lp[i] - lq[i]);
  return k;
}

double log_z(const std::vector<float>& l) {
  float mx = 0;
  double lse = 0;
  cpu::logsumexp(l.data(), int64_t(l.size()), &mx, &lse);
  return double(mx) + lse;
}

// A base of the given layout over `ps` (one vector of logits per position, next token 5), in memory.
KldBase make_base(const std::vector<std::vector<float>>& ps, int64_t k, const std::string& path = "") {
  KldHeader h;
  h.n_vocab = int64_t(ps[0].size()), h.n_ctx = 2 * int64_t(ps.size()) + 2, h.k = k;  // one chunk: ctx/2 - 1 positions
  KldRecorder rec(h, path);
  for (const auto& p : ps) rec.add(p.data(), log_z(p), 5, true);
  return rec.finish(1, 1);
}

KldResult compare(const KldBase& base, const std::vector<std::vector<float>>& qs) {
  KldAccumulator acc;
  for (size_t i = 0; i < qs.size(); ++i) {
    acc.add(base.at(int64_t(i)), qs[i].data(), log_z(qs[i]), int64_t(qs[i].size()));
    acc.add_pair(base.logp_next(int64_t(i)), double(float(qs[i][5] - log_z(qs[i]))));
  }
  return acc.result();
}

}  // namespace

TEST(Kld, EveryTokenLayoutIsWithinItsStatedBoundOfTheExactKld) {
  const int64_t nv = 5000;
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    const auto p = random_logits(nv, seed, 3.0f), q = random_logits(nv, seed + 100, 3.0f);
    const auto near = [&] {  // a quantized-like model: small perturbations of the base
      auto v = p;
      std::mt19937 rng(seed + 7);
      std::normal_distribution<float> nd(0.f, 0.05f);
      for (auto& x : v) x += nd(rng);
      return v;
    }();
    for (const auto* other : {&q, &near}) {
      const double full = full_kld(p, *other);
      const KldResult r = compare(make_base({p}, 0), {*other});
      EXPECT_GT(r.rounding_bound, 0.0);
      EXPECT_LE(std::fabs(r.mean - full), r.rounding_bound) << seed << " exact " << full << " stored " << r.mean;
      EXPECT_NEAR(r.mean, full, 1e-3 * full + 1e-7) << seed;
    }
  }
}

TEST(Kld, TopKIsExactWhenItCoversTheVocabularyAndALowerBoundOtherwise) {
  const int64_t nv = 300;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const auto p = random_logits(nv, seed, 3.0f), q = random_logits(nv, seed + 100, 3.0f);
    const double full = full_kld(p, q);
    const KldResult all = compare(make_base({p}, nv), {q}), top = compare(make_base({p}, 16), {q});
    EXPECT_NEAR(all.mean, full, 1e-5 * full) << seed;
    EXPECT_LE(top.mean, full + 1e-9) << seed;
    EXPECT_GT(top.mean, 0.0) << seed;
    EXPECT_GT(top.mean_rest, 0.0) << seed;
  }
}

TEST(Kld, IdenticalModelsGiveZeroAndFullAgreement) {
  const int64_t nv = 1000;
  std::vector<std::vector<float>> ps;
  for (uint32_t seed = 1; seed <= 10; ++seed) ps.push_back(random_logits(nv, seed, 2.0f));
  // Top-k: both sides reduced the same way, so exactly 0 (with the rest's mass).
  const KldResult top = compare(make_base(ps, 64), ps);
  EXPECT_EQ(top.n, 10);
  EXPECT_EQ(top.max, 0.0);
  EXPECT_DOUBLE_EQ(top.top1_agree, 1.0);
  EXPECT_EQ(top.dp_mean, 0.0);
  EXPECT_EQ(top.dlnppl, 0.0);
  EXPECT_EQ(top.dlnppl_err, 0.0);
  // Every token: the 16-bit rounding leaves KL(P^ || P), second order in the step, and within the bound.
  const KldResult all = compare(make_base(ps, 0), ps);
  EXPECT_LT(all.max, 1e-7);
  EXPECT_LE(all.mean, all.rounding_bound);
  EXPECT_DOUBLE_EQ(all.top1_agree, 1.0);
  EXPECT_EQ(all.dp_mean, 0.0);
  EXPECT_EQ(all.dlnppl, 0.0);
}

TEST(Kld, PairedDifferenceMatchesADirectComputation) {
  // Two "models" scoring the same 400 tokens: q's log-probabilities are p's plus noise, so the two
  // are strongly correlated and the paired error is far below the unpaired one.
  std::mt19937 rng(3);
  std::normal_distribution<double> lp_d(-3.0, 1.5), noise(-0.05, 0.2);
  const int n = 400;
  std::vector<double> lp(n), lq(n);
  KldAccumulator acc;
  for (int i = 0; i < n; ++i) {
    lp[i] = std::min(double(float(lp_d(rng))), -1e-3);
    lq[i] = double(float(lp[i] + noise(rng)));
    acc.add_pair(lp[i], lq[i]);
  }
  const KldResult r = acc.result();
  // Directly: d_i = nll_q - nll_p, its mean and the standard error of the mean.
  double md = 0, mp = 0, mq = 0;
  for (int i = 0; i < n; ++i) md += (lp[i] - lq[i]) / n, mp += -lp[i] / n, mq += -lq[i] / n;
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += std::pow(lp[i] - lq[i] - md, 2);
  const double se = std::sqrt(ss / (n - 1) / n);
  EXPECT_EQ(r.paired_n, n);
  EXPECT_NEAR(r.dlnppl, md, 1e-12);
  EXPECT_NEAR(r.dlnppl_err, se, 1e-9 * se);
  EXPECT_NEAR(r.ppl_base, std::exp(mp), 1e-9);
  EXPECT_NEAR(r.ppl, std::exp(mq), 1e-9);
  // PPL(Q) - PPL(base) by the delta method: each position's influence on the difference.
  const double a = std::exp(mq), b = std::exp(mp);
  double su = 0, sa = 0, sb = 0;
  for (int i = 0; i < n; ++i) {
    const double u = a * (-lq[i] - mq) - b * (-lp[i] - mp);
    su += u * u, sa += std::pow(a * (-lq[i] - mq), 2), sb += std::pow(b * (-lp[i] - mp), 2);
  }
  EXPECT_NEAR(r.dppl, a - b, 1e-9);
  EXPECT_NEAR(r.dppl_err, std::sqrt(su / (n - 1) / n), 1e-9 * r.dppl_err);
  EXPECT_NEAR(r.dppl_err_unpaired, std::sqrt((sa + sb) / (n - 1) / n), 1e-9 * r.dppl_err_unpaired);
  EXPECT_LT(r.dppl_err, 0.5 * r.dppl_err_unpaired);
  EXPECT_GT(r.nll_correlation, 0.9);
}

TEST(Kld, FileRoundTripsAndBadFilesAreNamedErrors) {
  const auto dir = test::scratch_dir();
  for (int64_t k : {int64_t(4), int64_t(0)}) {
    const std::string path = (dir / "base.kld").string();
    std::vector<std::vector<float>> ps;
    for (uint32_t s = 1; s <= 3; ++s) ps.push_back(random_logits(51, s, 1.0f));
    const KldBase mem = make_base(ps, k), file = make_base(ps, k, path);
    const KldBase back = KldBase::open(path);
    EXPECT_EQ(back.header().n_vocab, 51);
    EXPECT_EQ(back.header().k, k);
    ASSERT_EQ(back.positions(), 3);
    ASSERT_EQ(back.all_positions(), 3);
    EXPECT_EQ(test::read_bytes(path).size(), kld_file_bytes(51, k, 3, 3));
    for (int64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(back.at(i).next, 5);
      EXPECT_EQ(back.at(i).logp_next, mem.at(i).logp_next);
      EXPECT_EQ(back.logp_next(i), mem.logp_next(i));
      if (k) EXPECT_EQ(std::vector<int32_t>(back.at(i).ids, back.at(i).ids + k), std::vector<int32_t>(mem.at(i).ids, mem.at(i).ids + k));
      else EXPECT_EQ(std::vector<uint16_t>(back.at(i).code, back.at(i).code + 51), std::vector<uint16_t>(mem.at(i).code, mem.at(i).code + 51));
    }
    auto bytes = test::read_bytes(path);
    for (size_t cut : {size_t(0), size_t(7), size_t(40), bytes.size() - 1}) {
      test::write_bytes(dir / "cut.kld", std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(cut)));
      try {
        KldBase::open((dir / "cut.kld").string());
        ADD_FAILURE() << "truncated at " << cut << " was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cut.kld"), std::string::npos) << e.what();
      }
    }
    bytes[64] = 0xff;  // the first position's next token -> out of the vocabulary
    bytes[67] = 0x7f;
    test::write_bytes(dir / "bad.kld", bytes);
    EXPECT_THROW(KldBase::open((dir / "bad.kld").string()), Error);
    bytes[7] = '1';  // an older bonsai's file: named as such
    test::write_bytes(dir / "old.kld", bytes);
    try {
      KldBase::open((dir / "old.kld").string());
      ADD_FAILURE() << "a version-1 file was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("older bonsai"), std::string::npos) << e.what();
    }
  }
}
