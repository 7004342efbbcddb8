// The sensitivity cache: a table written under one key is reused only under the same key (model,
// statistics, calibration text, chunks, context, seed, top-k, method); any other key is a miss
// that names what changed; a damaged file is an Error naming it.
#include <gtest/gtest.h>

#include "formats/error.h"
#include "formats/text_file.h"
#include "mixed/sensitivity.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::mixed;

namespace {

SensitivityOptions options() {
  SensitivityOptions o;
  o.chunks = 4;
  o.ctx = 256;
  o.seed = 0;
  o.top_k = 1024;
  return o;
}

SensitivityTable table(const nlohmann::ordered_json& key) {
  SensitivityTable t;
  t.key = key;
  t.method = "gptq";
  t.types = {TypeId::PTQ1_0, TypeId::Q8_0};
  t.positions = 512;
  for (int b = 0; b < 2; ++b) {
    TensorSensitivity e;
    e.name = cat("blk.", b, ".ffn_up.weight");
    e.kind = "ffn_up";
    e.block = b;
    e.ne = {256, 768};
    e.kld = {{TypeId::PTQ1_0, 0.01 * (b + 1)}, {TypeId::Q8_0, 1e-5}};
    e.kld_err = {{TypeId::PTQ1_0, 0.001}, {TypeId::Q8_0, 1e-6}};
    e.bytes = {{TypeId::PTQ1_0, 43008}, {TypeId::Q8_0, 208896}};
    t.tensors.push_back(e);
  }
  return t;
}

}  // namespace

TEST(SensitivityCache, SameKeyIsReusedAndRoundTrips) {
  const auto dir = test::scratch_dir();
  const std::string path = (dir / "s.json").string();
  const auto key = sensitivity_key("aa", "bb", "cc", options(), "gptq");
  EXPECT_FALSE(load_cached(path, key).has_value());  // no file yet
  write_sensitivity(path, table(key));
  const auto back = load_cached(path, key);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->types, (std::vector<TypeId>{TypeId::PTQ1_0, TypeId::Q8_0}));
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_DOUBLE_EQ(back->tensors[1].kld.at(TypeId::PTQ1_0), 0.02);
  EXPECT_EQ(back->tensors[1].bytes.at(TypeId::Q8_0), 208896u);
  EXPECT_EQ(back->tensors[0].elements(), 256 * 768);
  EXPECT_EQ(back->find("blk.1.ffn_up.weight"), &back->tensors[1]);
}

TEST(SensitivityCache, AnyOtherKeyIsAMissNamingTheDifference) {
  const auto dir = test::scratch_dir();
  const std::string path = (dir / "s.json").string();
  const auto key = sensitivity_key("aa", "bb", "cc", options(), "gptq");
  write_sensitivity(path, table(key));
  auto o = options();
  std::string why;
  o.chunks = 8;
  EXPECT_FALSE(load_cached(path, sensitivity_key("aa", "bb", "cc", o, "gptq"), &why).has_value());
  EXPECT_NE(why.find("chunks"), std::string::npos) << why;
  o = options();
  o.seed = 1;
  EXPECT_FALSE(load_cached(path, sensitivity_key("aa", "bb", "cc", o, "gptq"), &why).has_value());
  EXPECT_NE(why.find("seed"), std::string::npos) << why;
  EXPECT_FALSE(load_cached(path, sensitivity_key("aa", "other stats", "cc", options(), "gptq"), &why).has_value());
  EXPECT_NE(why.find("stats_sha256"), std::string::npos) << why;
  EXPECT_FALSE(load_cached(path, sensitivity_key("other model", "bb", "cc", options(), "gptq"), &why).has_value());
  EXPECT_NE(why.find("model_sha256"), std::string::npos) << why;
  EXPECT_FALSE(load_cached(path, sensitivity_key("aa", "bb", "cc", options(), "optimal"), &why).has_value());
  EXPECT_NE(why.find("method"), std::string::npos) << why;
  EXPECT_TRUE(load_cached(path, sensitivity_key("aa", "bb", "cc", options(), "gptq")).has_value());
}

TEST(SensitivityCache, DamagedFilesAreErrorsNamingThem) {
  const auto dir = test::scratch_dir();
  const std::string path = (dir / "s.json").string();
  const auto key = sensitivity_key("aa", "bb", "cc", options(), "gptq");
  write_text_file(path, "{not json");
  test::expect_error([&] { load_cached(path, key); }, path);
  write_text_file(path, "{\"format\": \"something else\"}");
  test::expect_error([&] { load_cached(path, key); }, path);
  auto j = to_json(table(key));
  j["tensors"][0]["kld"]["PTQ1_0"] = -1.0;
  write_text_file(path, j.dump());
  EXPECT_NE(test::expect_error([&] { load_cached(path, key); }, path).find("KLD"), std::string::npos);
  j = to_json(table(key));
  j["tensors"][1]["bytes"].erase("Q8_0");
  write_text_file(path, j.dump());
  EXPECT_NE(test::expect_error([&] { load_cached(path, key); }, path).find("Q8_0"), std::string::npos);
  j = to_json(table(key));
  j["tensors"][0]["ne"] = {256, -1};
  write_text_file(path, j.dump());
  test::expect_error([&] { load_cached(path, key); }, path);
}

TEST(SensitivityCache, TypeListsAndKinds) {
  EXPECT_EQ(parse_type_list("ptq1_0,pq2_0,q4_0,q8_0", "--types"),
            (std::vector<TypeId>{TypeId::PTQ1_0, TypeId::PQ2_0, TypeId::Q4_0, TypeId::Q8_0}));
  EXPECT_NE(test::error_of([] { parse_type_list("ptq1_0,q5_k", "--types"); }).find("q5_k"), std::string::npos);
  EXPECT_NE(test::error_of([] { parse_type_list("q8_0,Q8_0", "--types"); }).find("twice"), std::string::npos);
  EXPECT_EQ(tensor_kind("blk.12.attn_output.weight"), "attn_output");
  EXPECT_EQ(tensor_kind("token_embd.weight"), "");
}

TEST(Sensitivity, RankAgreementIsSpearmansRho) {
  auto make = [](const std::vector<double>& v) {
    SensitivityTable t;
    for (size_t i = 0; i < v.size(); ++i) {
      TensorSensitivity e;
      e.name = cat("blk.", i, ".ffn_up.weight");
      e.kld = {{TypeId::PTQ1_0, v[i]}};
      t.tensors.push_back(e);
    }
    return t;
  };
  const SensitivityTable a = make({0.1, 0.2, 0.3, 0.4, 0.5});
  EXPECT_DOUBLE_EQ(rank_agreement(a, make({1, 2, 3, 4, 50}), TypeId::PTQ1_0, "b"), 1.0);  // same order
  EXPECT_DOUBLE_EQ(rank_agreement(a, make({5, 4, 3, 2, 1}), TypeId::PTQ1_0, "b"), -1.0);
  // One adjacent swap among 5: rho = 1 - 6 * 2 / (5 * 24) = 0.9.
  EXPECT_NEAR(rank_agreement(a, make({1, 3, 2, 4, 5}), TypeId::PTQ1_0, "b"), 0.9, 1e-12);
  test::expect_error([&] { rank_agreement(a, make({1, 2}), TypeId::PTQ1_0, "b.json"); }, "b.json");
}
