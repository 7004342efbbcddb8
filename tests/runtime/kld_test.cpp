// KL divergence against a saved base (runtime/kld.h): exact when k covers the vocabulary, a lower
// bound of the full KLD otherwise, 0 for identical models; the file round-trips and bad files are
// named errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <vector>

#include "formats/error.h"
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

}  // namespace

TEST(Kld, ExactWhenTopKCoversTheVocabularyAndALowerBoundOtherwise) {
  const int64_t nv = 300;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const auto p = random_logits(nv, seed, 3.0f), q = random_logits(nv, seed + 100, 3.0f);
    const double full = full_kld(p, q);
    KldAccumulator all, top;
    all.add(reduce_logits(p.data(), nv, nv, 5), q.data(), nv);
    top.add(reduce_logits(p.data(), nv, 16, 5), q.data(), nv);
    EXPECT_NEAR(all.result().mean, full, 1e-5 * full) << seed;
    EXPECT_LE(top.result().mean, full + 1e-9) << seed;
    EXPECT_GT(top.result().mean, 0.0) << seed;
    EXPECT_GT(top.result().mean_rest, 0.0) << seed;
  }
}

TEST(Kld, IdenticalModelsGiveZeroAndFullAgreement) {
  const int64_t nv = 1000;
  KldAccumulator acc;
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    const auto p = random_logits(nv, seed, 2.0f);
    acc.add(reduce_logits(p.data(), nv, 64, int32_t(seed)), p.data(), nv);
  }
  const KldResult r = acc.result();
  EXPECT_EQ(r.n, 10);
  // Both sides are reduced the same way, so the same logits give exactly 0 (with the rest's mass).
  EXPECT_EQ(r.max, 0.0);
  EXPECT_DOUBLE_EQ(r.top1_agree, 1.0);
  EXPECT_EQ(r.dp_mean, 0.0);
}

TEST(Kld, FileRoundTripsAndBadFilesAreNamedErrors) {
  const auto dir = test::scratch_dir();
  const std::string path = (dir / "base.kld").string();
  KldHeader h;
  h.n_vocab = 50, h.n_ctx = 8, h.chunks = 1, h.k = 4, h.tokens_hash = 1234;
  std::vector<BaseDist> d;
  for (uint32_t s = 1; s <= 3; ++s) {
    const auto l = random_logits(50, s, 1.0f);
    d.push_back(reduce_logits(l.data(), 50, 4, int32_t(s)));
  }
  write_kld(path, h, d);
  KldHeader h2;
  const auto back = read_kld(path, &h2);
  EXPECT_EQ(h2.n_vocab, 50);
  EXPECT_EQ(h2.k, 4);
  EXPECT_EQ(h2.tokens_hash, 1234u);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[2].ids, d[2].ids);
  EXPECT_EQ(back[2].logp, d[2].logp);
  EXPECT_EQ(back[2].next, 3);

  auto bytes = test::read_bytes(path);
  for (size_t cut : {size_t(0), size_t(7), size_t(40), bytes.size() - 1}) {
    test::write_bytes(dir / "cut.kld", std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(cut)));
    try {
      read_kld((dir / "cut.kld").string(), &h2);
      ADD_FAILURE() << "truncated at " << cut << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cut.kld"), std::string::npos) << e.what();
    }
  }
  bytes[64] = 0xff;  // first token id of the first position -> out of the vocabulary
  bytes[65] = 0x7f;
  test::write_bytes(dir / "bad.kld", bytes);
  EXPECT_THROW(read_kld((dir / "bad.kld").string(), &h2), Error);
}
