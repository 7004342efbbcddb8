// Plans: the presets on zh-tiny-qwen3's tensors (the runtime's own list for its config), rule
// order, method precedence, and an error naming the plan file and line for every bad plan.
#include <gtest/gtest.h>

#include <fstream>

#include "formats/error.h"
#include "quantize/plan.h"
#include "runtime/model.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::quant;

namespace {

// zh-tiny-qwen3's configuration (shared/models/zh-tiny-qwen3/config.json), tied embeddings.
std::vector<Tensor> zh_tiny_tensors(int64_t n_layer = 6) {
  ModelConfig c;
  c.arch = "qwen3";
  c.n_vocab = 151936;
  c.n_embd = 256;
  c.n_layer = n_layer;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 64;
  c.n_ff = 768;
  c.qk_norm = true;
  std::vector<Tensor> out;
  for (const auto& s : architecture_tensors(c, true)) {
    Tensor t;
    t.name = s.name;
    t.ne = s.ne;
    out.push_back(t);
  }
  return out;
}

using test::error_of;

std::string write_plan(const std::string& name, const std::string& text) {
  const auto p = test::scratch_dir() / name;
  std::ofstream(p) << text;
  return p.string();
}

}  // namespace

TEST(Plan, PresetsAreCompiledIn) {
  const auto names = preset_names();
  for (const char* want : {"ternary-all", "ternary-keep-embed-head-q8", "ternary-first3-last2-q8"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  const std::string e = error_of([] { load_plan("no-such-plan"); });
  EXPECT_NE(e.find("no-such-plan"), std::string::npos) << e;
  EXPECT_NE(e.find("ternary-keep-embed-head-q8"), std::string::npos) << e;  // lists the presets
}

TEST(Plan, TernaryAll) {
  const auto ts = zh_tiny_tensors();
  const ResolvedPlan r = resolve_plan(load_plan("ternary-all"), ts, 6, std::nullopt, Method::optimal);
  ASSERT_EQ(r.tensors.size(), ts.size());
  for (const auto& t : r.tensors) {
    if (t.ne.size() == 1) {
      EXPECT_EQ(t.type, TypeId::F32) << t.name;
      EXPECT_FALSE(t.method) << t.name;
    } else {
      EXPECT_EQ(t.type, TypeId::PTQ1_0) << t.name;
      EXPECT_EQ(t.method, Method::optimal) << t.name;
    }
  }
  EXPECT_EQ(r.find("token_embd.weight")->type, TypeId::PTQ1_0);
  EXPECT_EQ(r.dominant_block_type(), TypeId::PTQ1_0);
  // Every byte accounted: block matrices at PTQ1_0's rate.
  EXPECT_NEAR(8.0 * double(r.block_linear_bytes) / double(r.block_linear_elems), traits(TypeId::PTQ1_0).bits_per_weight(),
              1e-12);
  EXPECT_EQ(r.block_linear_elems, 6 * (256 * 256 * 2 + 256 * 128 * 2 + 3 * 256 * 768));
}

TEST(Plan, KeepEmbedHeadQ8) {
  const auto ts = zh_tiny_tensors();
  const ResolvedPlan r = resolve_plan(load_plan("ternary-keep-embed-head-q8"), ts, 6, Method::gptq, Method::rtn);
  EXPECT_EQ(r.find("token_embd.weight")->type, TypeId::Q8_0);
  EXPECT_FALSE(r.find("token_embd.weight")->method);
  EXPECT_EQ(r.find("blk.0.attn_q.weight")->type, TypeId::PTQ1_0);
  EXPECT_EQ(r.find("blk.5.ffn_down.weight")->method, Method::gptq);  // --method beats the fallback
  EXPECT_EQ(r.find("blk.5.attn_q_norm.weight")->type, TypeId::F32);
  EXPECT_TRUE(r.needs_gram());
  uint64_t sum = 0;
  for (const auto& t : r.tensors) sum += t.bytes;
  EXPECT_EQ(sum, r.total_bytes);
  EXPECT_EQ(r.find("token_embd.weight")->bytes, *tensor_bytes(TypeId::Q8_0, std::vector<int64_t>{256, 151936}));
  const std::string table = r.table();
  EXPECT_NE(table.find("blk.3.ffn_up.weight"), std::string::npos);
  EXPECT_NE(table.find("bits/weight"), std::string::npos);
  const std::string json = r.json();
  EXPECT_NE(json.find("\"token_embd.weight\":{\"type\":\"Q8_0\""), std::string::npos) << json.substr(0, 300);
}

TEST(Plan, FirstThreeLastTwoUseNegativeIndices) {
  const auto ts = zh_tiny_tensors();
  const ResolvedPlan r = resolve_plan(load_plan("ternary-first3-last2-q8"), ts, 6, std::nullopt, Method::gptq);
  for (int64_t l = 0; l < 6; ++l) {
    const auto* t = r.find("blk." + std::to_string(l) + ".ffn_gate.weight");
    EXPECT_EQ(t->type, l == 3 ? TypeId::PTQ1_0 : TypeId::Q8_0) << l;
    EXPECT_EQ(r.find("blk." + std::to_string(l) + ".attn_norm.weight")->type, TypeId::F32);
  }
  // The same plan on a 9-block model: the last two are 7 and 8.
  const ResolvedPlan r9 = resolve_plan(load_plan("ternary-first3-last2-q8"), zh_tiny_tensors(9), 9, std::nullopt, Method::gptq);
  for (int64_t l = 0; l < 9; ++l)
    EXPECT_EQ(r9.find("blk." + std::to_string(l) + ".attn_v.weight")->type,
              (l <= 2 || l >= 7) ? TypeId::Q8_0 : TypeId::PTQ1_0) << l;
}

TEST(Plan, LaterRulesOverrideAndMethodPrecedence) {
  const Plan p = parse_plan(R"(default: Q4_0
method: absmean
rules:
  - match: 'attn_'
    type: PTQ1_0
    method: optimal
  - match: 'attn_v'
    type: PQ2_0
  - match: 'ffn_down'
    layers: 1
    type: PTQ1_0
)",
                            "inline.yaml");
  const ResolvedPlan r = resolve_plan(p, zh_tiny_tensors(), 6, std::nullopt, Method::gptq);
  EXPECT_EQ(r.find("blk.0.attn_q.weight")->method, Method::optimal);  // the rule's method
  EXPECT_EQ(r.find("blk.0.attn_v.weight")->type, TypeId::PQ2_0);       // later rule wins ...
  EXPECT_EQ(r.find("blk.0.attn_v.weight")->method, Method::absmean);   // ... with the plan's method
  EXPECT_EQ(r.find("blk.1.ffn_down.weight")->type, TypeId::PTQ1_0);
  EXPECT_EQ(r.find("blk.2.ffn_down.weight")->type, TypeId::Q4_0);
  EXPECT_EQ(r.find("token_embd.weight")->type, TypeId::Q4_0);
  const ResolvedPlan cli = resolve_plan(p, zh_tiny_tensors(), 6, Method::rtn, Method::gptq);
  EXPECT_EQ(cli.find("blk.0.attn_v.weight")->method, Method::rtn);    // --method beats the plan's
  EXPECT_EQ(cli.find("blk.0.attn_q.weight")->method, Method::optimal);  // a rule's beats --method
  EXPECT_EQ(block_index("blk.12.attn_q.weight"), 12);
  EXPECT_EQ(block_index("token_embd.weight"), -1);
  EXPECT_EQ(block_index("blk.x.attn_q.weight"), -1);
}

TEST(Plan, ErrorsNameTheFileAndLine) {
  struct Case {
    const char* name;
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"bad-yaml.yaml", "default: PTQ1_0\nrules:\n  - match: [unclosed\n", ":4: bad YAML"},
      {"unknown-type.yaml", "default: PTQ1_0\nrules:\n  - match: 'attn'\n    type: Q3_K\n", ":4: unknown type 'Q3_K'"},
      {"unknown-default.yaml", "default: INT4\n", ":1: unknown type 'INT4'"},
      {"bad-method.yaml", "default: PTQ1_0\nrules:\n  - match: 'attn'\n    type: PTQ1_0\n    method: magic\n",
       "yaml:5: quantize: unknown method 'magic'"},
      {"method-q8.yaml", "default: PTQ1_0\nrules:\n  - match: 'attn'\n    type: Q8_0\n    method: gptq\n",
       ":3: 'method' applies to PTQ1_0 and PQ2_0 only"},
      {"bad-regex.yaml", "default: PTQ1_0\nrules:\n  - match: 'attn_(q'\n    type: Q8_0\n", ":3: bad regex 'attn_(q'"},
      {"no-default.yaml", "rules: []\n", "needs 'default'"},
      {"unknown-key.yaml", "default: PTQ1_0\nrulez: []\n", ":2: unknown key 'rulez'"},
      {"rule-key.yaml", "default: PTQ1_0\nrules:\n  - match: 'a'\n    type: Q8_0\n    layer: 1\n", ":5: unknown rule key 'layer'"},
      {"no-type.yaml", "default: PTQ1_0\nrules:\n  - match: 'attn'\n", ":3: a rule needs 'type'"},
      {"bad-layers.yaml", "default: PTQ1_0\nrules:\n  - match: 'attn'\n    layers: [one]\n    type: Q8_0\n",
       ":4: 'one' is not a block index"},
      {"not-a-map.yaml", "- 1\n- 2\n", "a plan is a YAML mapping"},
      // Keys that are not scalars: yaml-cpp's conversion error becomes an Error naming the plan.
      {"list-key.yaml", "? [a, b]\n: 1\ndefault: PTQ1_0\n", ": bad YAML"},
      {"list-rule-key.yaml", "default: PTQ1_0\nrules:\n  - {[match]: 'a', type: Q8_0}\n", ": bad YAML"},
      // Regexes are bounded: std::regex recurses over the pattern.
      {"long-regex.yaml", "default: PTQ1_0\nrules:\n  - match: '((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((a'\n    type: Q8_0\n",
       ":3: regex of 267 bytes (at most 256)"},
      // libstdc++ overflows a long reading a count of 19 digits (found by the plan fuzz target).
      {"regex-count.yaml", "default: PTQ1_0\nrules:\n  - match: 'a{5555555555555555555}'\n    type: Q8_0\n",
       ":3: regex 'a{5555555555555555555}' holds a number of more than 6 digits"},
  };
  for (const auto& c : cases) {
    const std::string path = write_plan(c.name, c.text);
    const std::string e = error_of([&] { load_plan(path); });
    EXPECT_NE(e.find(path), std::string::npos) << c.name << ": " << e;
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.name << ": " << e;
  }
  // Errors that need the model: a rule matching nothing, a block range outside it, a type whose
  // blocks do not divide the rows.
  const struct {
    const char* name;
    const char* text;
    const char* expect;
  } model_cases[] = {
      {"no-match.yaml", "default: PTQ1_0\nrules:\n  - match: 'attn_qkv'\n    type: Q8_0\n",
       ":3: rule 'attn_qkv' matches no matrix"},
      {"norm-only.yaml", "default: PTQ1_0\nrules:\n  - match: 'norm'\n    type: Q8_0\n", ":3: rule 'norm' matches no matrix"},
      {"range.yaml", "default: PTQ1_0\nrules:\n  - match: 'attn'\n    layers: 4-7\n    type: Q8_0\n",
       ":3: block range 4..7 is not within the model's 6 blocks"},
  };
  for (const auto& c : model_cases) {
    const std::string path = write_plan(c.name, c.text);
    const Plan p = load_plan(path);
    const std::string e = error_of([&] { resolve_plan(p, zh_tiny_tensors(), 6, std::nullopt, Method::gptq); });
    EXPECT_NE(e.find(path), std::string::npos) << c.name << ": " << e;
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.name << ": " << e;
  }
  // stories260K's 64-wide rows cannot hold 128-element PTQ1_0 blocks.
  std::vector<Tensor> narrow(1);
  narrow[0].name = "blk.0.attn_q.weight";
  narrow[0].ne = {64, 64};
  const std::string e = error_of([&] { resolve_plan(load_plan("ternary-all"), narrow, 1, std::nullopt, Method::gptq); });
  EXPECT_NE(e.find("preset ternary-all"), std::string::npos) << e;
  EXPECT_NE(e.find("rows of 64 are not a multiple of 128"), std::string::npos) << e;
}

TEST(Plan, CommandLineOverridesWinAndAreShown) {
  const auto ts = zh_tiny_tensors();
  Plan p = load_plan("ternary-keep-embed-head-q8");
  PlanOverrides o;
  o.tensor_types = {"blk\\.0\\..*=q8_0", "ffn_down=f16"};
  o.token_embd_type = "q4_0";
  o.output_type = "q8_0";  // zh-tiny ties its head: no output.weight, and that is not an error
  apply_overrides(p, o);
  const ResolvedPlan r = resolve_plan(p, ts, 6, std::nullopt, Method::gptq);
  EXPECT_EQ(r.find("blk.0.attn_q.weight")->type, TypeId::Q8_0);
  EXPECT_FALSE(r.find("blk.0.attn_q.weight")->method);
  EXPECT_EQ(r.find("blk.0.ffn_down.weight")->type, TypeId::F16);  // the later override wins
  EXPECT_EQ(r.find("blk.3.ffn_down.weight")->type, TypeId::F16);
  EXPECT_EQ(r.find("blk.3.ffn_up.weight")->type, TypeId::PTQ1_0);  // the plan's rule
  EXPECT_EQ(r.find("token_embd.weight")->type, TypeId::Q4_0);
  EXPECT_EQ(r.find("token_embd.weight")->rule_option, "--token-embedding-type q4_0");
  const std::string table = r.table();
  EXPECT_NE(table.find("<- --tensor-type ffn_down=f16"), std::string::npos) << table;

  for (const char* bad : {"ffn_down", "=q8_0", "ffn_down=", "ffn_down=q3_k", "[=q8_0", "nomatch=q8_0"}) {
    Plan q = load_plan("ternary-all");
    PlanOverrides b;
    b.tensor_types = {bad};
    try {
      apply_overrides(q, b);
      resolve_plan(q, ts, 6, std::nullopt, Method::gptq);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--tensor-type"), std::string::npos) << bad << ": " << e.what();
    }
  }
}

// Damaged plan files (test::damage_file over the fuzz seeds, as every reader of untrusted input):
// a flipped bit or a cut file is a plan, or an Error naming the file, never a crash. A YAML file
// cut short can still be a plan, so cuts need not be refused.
TEST(PlanMalformedInput, FlipsAndCutsAreErrorsNamingTheFile) {
  for (const char* seed : {"seed-ternary-all.yaml", "seed-ternary-first3-last2-q8.yaml"}) {
    SCOPED_TRACE(seed);
    const auto good = test::fuzz_seed("plan", seed);
    const auto d = test::damage_file(
        test::scratch_dir() / "plan.yaml", good, good.size(), good.size(),
        [](const std::string& p) { (void)load_plan(p); }, /*cuts_may_parse=*/true);
    EXPECT_GT(d.flips_refused, d.flips / 10);
    EXPECT_GT(d.cuts_refused, 0u);
  }
}
