// `bonsai plan` end to end on a small hand-made sensitivity table for zh-tiny's 42 block
// matrices: the plan respects the budget, spends it where the table says the loss is, and the
// YAML it writes is one `bonsai quantize --plan` accepts with the same sizes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/model_file.h"
#include "formats/text_file.h"
#include "mixed/budget.h"
#include "mixed/sensitivity.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::mixed;

namespace {

// Every block matrix: loss falls with bits; blk.0.ffn_down is 100 times as sensitive as the rest.
SensitivityTable hand_made(const TensorSet& m) {
  SensitivityTable t;
  t.key = {{"hand", "made"}};
  t.method = "optimal";
  t.types = {TypeId::PTQ1_0, TypeId::PQ2_0, TypeId::Q8_0};
  t.positions = 1;
  for (const Tensor& w : m.tensors) {
    if (quant::block_index(w.name) < 0 || w.ne.size() < 2) continue;
    TensorSensitivity e;
    e.name = w.name;
    e.kind = tensor_kind(w.name);
    e.block = quant::block_index(w.name);
    e.ne = w.ne;
    const double s = w.name == "blk.0.ffn_down.weight" ? 100.0 : 1.0;
    e.kld = {{TypeId::PTQ1_0, 0.02 * s}, {TypeId::PQ2_0, 0.008 * s}, {TypeId::Q8_0, 0.0001 * s}};
    for (TypeId ty : t.types) e.bytes[ty] = *tensor_bytes(ty, w.ne);
    t.tensors.push_back(e);
  }
  return t;
}

}  // namespace

TEST(PlanCli, BudgetedPlanIsWithinBudgetAndQuantizeReadsIt) {
  BONSAI_REQUIRE_SHARED("models/zh-tiny-qwen3/config.json");
  const std::string model = test::shared_file("models/zh-tiny-qwen3").string();
  const auto dir = test::scratch_dir();
  const std::string sens = (dir / "s.json").string(), plan = (dir / "b22.yaml").string();
  const TensorSet m = open_model(model);
  write_sensitivity(sens, hand_made(m));
  std::string out;
  ASSERT_EQ(test::run_bonsai("plan --budget 2.2bpw -m " + model + " --sensitivity " + sens + " -o " + plan + " --json", &out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_LE(j["bpw_block_linear"].get<double>(), 2.2);
  EXPECT_GT(j["bpw_block_linear"].get<double>(), 2.1);  // the budget is used, not left idle
  EXPECT_LE(j["block_bytes"].get<uint64_t>(), j["block_budget_bytes"].get<uint64_t>());
  EXPECT_TRUE(j["exact"].get<bool>());
  const std::string yaml = read_text_file(plan);
  // The sensitive tensor gets Q8_0: 100 x the loss for 4% of the weights (its 6.75 extra bits
  // fit in the 0.45 the budget gives beyond PTQ1_0, and buy more than PQ2_0 spread elsewhere).
  EXPECT_NE(yaml.find("'^blk\\.0\\.ffn_down\\.weight$'\n    type: Q8_0"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("method: optimal"), std::string::npos);
  ASSERT_EQ(test::run_bonsai("quantize -m " + model + " -o " + (dir / "x.gguf").string() + " --plan " + plan + " --dry-run",
                             &out),
            0)
      << out;
  char want[64];
  std::snprintf(want, sizeof want, "block linear weights: %.4f bits/weight", j["bpw_block_linear"].get<double>());
  EXPECT_NE(out.find(want), std::string::npos) << out;
  // A budget below every tensor at its smallest type is refused with the minimum.
  EXPECT_NE(test::run_bonsai("plan --budget 1.5bpw -m " + model + " --sensitivity " + sens + " -o " + plan, &out), 0);
  EXPECT_NE(out.find("smallest possible choice"), std::string::npos) << out;
  // A type the table never measured is refused naming the table.
  EXPECT_NE(test::run_bonsai("plan --budget 3bpw --types ptq1_0,q4_0 -m " + model + " --sensitivity " + sens + " -o " + plan,
                             &out),
            0);
  EXPECT_NE(out.find("s.json"), std::string::npos) << out;
  EXPECT_NE(out.find("Q4_0"), std::string::npos) << out;
}

TEST(PlanBudget, ParsesBudgets) {
  EXPECT_TRUE(parse_budget("2.2bpw").is_bpw);
  EXPECT_DOUBLE_EQ(parse_budget("2.2BPW").bpw, 2.2);
  EXPECT_EQ(parse_budget("40MB").bytes, 40000000u);
  EXPECT_EQ(parse_budget("1.5MiB").bytes, 1572864u);
  EXPECT_EQ(parse_budget("123").bytes, 123u);
  EXPECT_NE(test::error_of([] { parse_budget("40 parsecs"); }).find("unit"), std::string::npos);
  EXPECT_NE(test::error_of([] { parse_budget("-2bpw"); }).find("--budget"), std::string::npos);
  EXPECT_EQ(exact_regex("blk.0.attn_q.weight"), "^blk\\.0\\.attn_q\\.weight$");
}
