// bonsai inspect FILE: what a model file holds — format, metadata, tensors, sizes.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "cli/json_out.h"
#include "formats/model_file.h"
#include "formats/summary.h"
#include "quantize/canonical.h"

namespace bonsai::cli {
namespace {

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("model", po::value<std::string>()->required(),
                     "GGUF, .bonsai, safetensors file, Hugging Face folder or llama2.c .bin")(
      "no-tensors", po::bool_switch(), "print metadata and totals only")(
      "all-items", po::bool_switch(), "print arrays in full instead of their first items")(
      "check-blocks", po::bool_switch(),
      "check every PTQ1_0 / PQ2_0 tensor is canonical: decoded by the golden-tested decoder and re-encoded by "
      "the reference rule, it gives the same bytes (exit 1 naming the first tensor and block that does not)");
  add_json(opts);
  po::positional_options_description pos;
  pos.add("model", 1);
  po::variables_map vm;
  if (!parse(args, "bonsai inspect FILE [--no-tensors] [--all-items] [--check-blocks] [--json]",
             "Shows a model file: its format, metadata (long arrays abbreviated), a tensor table\n"
             "(name, type, shape, bytes, bits/weight) and totals per type. Reads GGUF, .bonsai,\n"
             "safetensors (a file or a Hugging Face folder) and llama2.c checkpoints.\n\n"
             "examples:\n  bonsai inspect model.gguf\n  bonsai inspect zh-tiny-qwen3/ --json | jq .totals\n"
             "  bonsai inspect model-ptq1.gguf --no-tensors --check-blocks",
             opts, pos, vm))
    return 0;

  const std::string path = vm["model"].as<std::string>();
  const TensorSet ts = open_model(path);
  const SizeSummary sum = summarize(ts);
  const size_t max_items = vm["all-items"].as<bool>() ? SIZE_MAX : 8;

  // --check-blocks: the ternary tensors checked, and the first one that is not canonical.
  const bool check = vm["check-blocks"].as<bool>();
  int64_t checked = 0, bad_block = -1;
  std::string bad_tensor;
  if (check)
    for (const Tensor& t : ts.tensors) {
      if (t.type != TypeId::PTQ1_0 && t.type != TypeId::PQ2_0) continue;
      ++checked;
      bad_block = quant::first_noncanonical_block(t);
      if (bad_block >= 0) {
        bad_tensor = t.name;
        break;
      }
    }
  const int rc = bad_block >= 0 ? 1 : 0;

  if (vm["json"].as<bool>()) {
    nlohmann::json j;
    j["file"] = path;
    j["format"] = ts.format;
    j["metadata"] = nlohmann::json::object();
    for (const auto& [k, v] : ts.meta.items()) j["metadata"][k] = kv_to_json(v, max_items == SIZE_MAX ? SIZE_MAX : 16);
    j["tensors"] = nlohmann::json::array();
    if (!vm["no-tensors"].as<bool>())
      for (const Tensor& t : ts.tensors)
        j["tensors"].push_back({{"name", t.name}, {"type", traits(t.type).name}, {"shape", t.ne},
                                {"bytes", t.nbytes}, {"bits_per_weight", traits(t.type).bits_per_weight()}});
    auto totals = [](const SizeTotals& t) {
      return nlohmann::json{{"tensors", t.tensors}, {"params", t.params}, {"bytes", t.bytes},
                            {"bits_per_weight", t.bits_per_weight()}};
    };
    j["totals"] = totals(sum.all);
    j["totals"]["by_type"] = nlohmann::json::object();
    for (const auto& [name, t] : sum.by_type) j["totals"]["by_type"][name] = totals(t);
    if (check)
      j["check_blocks"] = {{"ternary_tensors_checked", checked},
                           {"canonical", bad_block < 0},
                           {"first_bad_tensor", bad_block < 0 ? nlohmann::json(nullptr) : nlohmann::json(bad_tensor)},
                           {"first_bad_block", bad_block < 0 ? nlohmann::json(nullptr) : nlohmann::json(bad_block)}};
    print_json(j);
    return rc;
  }

  std::printf("file:     %s\nformat:   %s\n", path.c_str(), ts.format.c_str());
  std::printf("metadata: %zu keys\n", ts.meta.size());
  for (const auto& [k, v] : ts.meta.items())
    std::printf("  %-44s %s\n", k.c_str(), kv_to_string(v, max_items).c_str());
  if (!vm["no-tensors"].as<bool>()) {
    std::printf("tensors:  %zu\n  %-40s %-7s %-22s %14s %7s\n", ts.tensors.size(), "name", "type", "shape",
                "bytes", "bpw");
    for (const Tensor& t : ts.tensors)
      std::printf("  %-40s %-7s %-22s %14llu %7.4g\n", t.name.c_str(), traits(t.type).name, t.shape_str().c_str(),
                  static_cast<unsigned long long>(t.nbytes), traits(t.type).bits_per_weight());
  }
  std::printf("totals:\n  %-8s %8s %16s %16s %9s\n", "type", "tensors", "params", "bytes", "bpw");
  auto row = [](const char* name, const SizeTotals& t) {
    std::printf("  %-8s %8lld %16lld %16llu %9.4f\n", name, static_cast<long long>(t.tensors),
                static_cast<long long>(t.params), static_cast<unsigned long long>(t.bytes), t.bits_per_weight());
  };
  for (const auto& [name, t] : sum.by_type) row(name.c_str(), t);
  row("all", sum.all);
  if (check) {
    if (bad_block < 0)
      std::printf("check-blocks: all %lld PTQ1_0/PQ2_0 tensors canonical (decode -> reference re-encode gives the "
                  "same bytes)\n", static_cast<long long>(checked));
    else
      std::fprintf(stderr, "%s: tensor '%s' block %lld is not canonical: decoding and re-encoding it by the reference "
                   "rule gives other bytes (damaged, or not written by a PrismML-compatible encoder)\n",
                   path.c_str(), bad_tensor.c_str(), static_cast<long long>(bad_block));
  }
  return rc;
}

const Registrar reg({"inspect", "show a model file's format, metadata, tensors and sizes", run});

}  // namespace
}  // namespace bonsai::cli
