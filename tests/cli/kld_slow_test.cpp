// `bonsai perplexity --save-logits / --kl-base` end to end on stories260K: a model against itself
// gives KLD 0 (exactly in the top-k layout, within the printed rounding bound in the every-token
// one), 100% top-1 agreement and a paired difference of exactly 0; --kl-chunks keeps the first
// chunks' distributions while the paired difference covers all; a mismatched run (other --ctx)
// is refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support.h"

using bonsai::test::run_bonsai;
using bonsai::test::shared_file;

TEST(PerplexityKld, ModelAgainstItselfIsZero) {
  BONSAI_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const auto dir = bonsai::test::scratch_dir();
  const std::string m = shared_file("models/stories260K/stories260K.gguf").string();
  const std::string text = shared_file("corpora/en/tinystories_validation_100.txt").string();
  const std::string base = (dir / "base.kld").string(), top = (dir / "top.kld").string();
  std::string out;
  ASSERT_EQ(run_bonsai("perplexity -m " + m + " -f " + text + " --ctx 128 --chunks 8 --kl-chunks 5 --save-logits " + base +
                           " --json", &out), 0)
      << out;
  const double base_ppl = nlohmann::json::parse(out.substr(out.find('{')))["ppl"].get<double>();
  ASSERT_EQ(run_bonsai("perplexity -m " + m + " -f " + text + " --ctx 128 --chunks 8 --save-logits " + top +
                           " --kl-top-k 512 --json", &out), 0)
      << out;

  ASSERT_EQ(run_bonsai("perplexity -m " + m + " -f " + text + " --ctx 128 --kl-base " + base + " --json", &out), 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["chunks"], 8);                  // the base's chunks
  EXPECT_EQ(j["kld"]["positions"], 5 * 63);   // --kl-chunks 5
  EXPECT_EQ(j["paired"]["positions"], 8 * 63);
  EXPECT_LT(j["kld"]["max"].get<double>(), 1e-6);
  EXPECT_LE(j["kld"]["mean"].get<double>(), j["kld"]["rounding_bound"].get<double>());
  EXPECT_DOUBLE_EQ(j["kld"]["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(j["paired"]["delta_ln_ppl"].get<double>(), 0.0);
  EXPECT_EQ(j["paired"]["delta_ln_ppl_err"].get<double>(), 0.0);
  EXPECT_NEAR(j["paired"]["ppl_base"].get<double>(), base_ppl, 1e-5 * base_ppl);

  ASSERT_EQ(run_bonsai("perplexity -m " + m + " -f " + text + " --ctx 128 --kl-base " + top + " --json", &out), 0) << out;
  j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["kld"]["positions"], 8 * 63);
  EXPECT_EQ(j["kld"]["max"].get<double>(), 0.0);  // the same logits, reduced the same way
  EXPECT_DOUBLE_EQ(j["kld"]["base_rest_mass_mean"].get<double>(), 0.0);  // k = the whole vocabulary

  EXPECT_NE(run_bonsai("perplexity -m " + m + " -f " + text + " --ctx 64 --kl-base " + base, &out), 0);
  EXPECT_NE(out.find("base.kld"), std::string::npos) << out;
  EXPECT_NE(out.find("--ctx 128"), std::string::npos) << out;
}
