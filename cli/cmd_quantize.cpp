// bonsai quantize -m SRC -o OUT: calibrated ternary quantization (quantize/pipeline.h).
#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/command.h"
#include "cli/json_out.h"
#include "cli/progress.h"
#include "formats/error.h"
#include "formats/residual.h"
#include "quantize/pipeline.h"
#include "runtime/anon_peak.h"

namespace bonsai::cli {
namespace {

// The kind of a block weight ("attn_q") from its name ("blk.3.attn_q.weight").
std::string kind_of(const std::string& name) {
  const size_t a = name.find('.', 4), b = name.rfind('.');
  return a != std::string::npos && b > a ? name.substr(a + 1, b - a - 1) : name;
}

// PQ2_0 weights (stage 2): each layer's error after stage 1 and after stage 2, and how much of the
// fourth level (+2d, stored code 3) the grid used.
void print_stage2(const quant::QuantizeResult& r) {
  int64_t n = 0;
  double plus2 = 0;
  for (const auto& e : r.errors)
    if (e.stage1_error) n += e.elements, plus2 += e.plus2_share * double(e.elements);
  if (n == 0) return;
  std::printf("stage 2 (PQ2_0 four-level grid): relative output error after stage 1 -> after stage 2, share of code 3:\n");
  for (const auto& e : r.errors)
    if (e.stage1_error)
      std::printf("  %-28s %.5f -> %.5f  code 3 %.2f%%\n", e.name.c_str(), *e.stage1_error,
                  e.grid_error ? *e.grid_error : e.rel_error, 100.0 * e.plus2_share);  // the grid's, before R̂
  std::printf("code 3 (+2d) share over the PQ2_0 weights: %.3f%% of %lld\n", 100.0 * plus2 / double(n), (long long)n);
}

// Residual codebooks: each layer's error without and with R̂, and bits/weight over the ternary
// tensors counted honestly (base blocks + codebooks + indices + μ/σ).
void print_residual(const quant::QuantizeResult& r) {
  int64_t n = 0;
  uint64_t base = 0, extra = 0;
  for (const auto& e : r.errors)
    if (quant::is_ternary(e.type)) {
      n += e.elements;
      base += *tensor_bytes(e.type, std::vector<int64_t>{kRcGroup, e.elements / kRcGroup});
      extra += e.residual_bytes;
    }
  if (n == 0) return;
  if (extra > 0) {
    std::printf("residual codebooks: relative output error without -> with R̂:\n");
    for (const auto& e : r.errors)
      if (e.grid_error) std::printf("  %-28s %.5f -> %.5f  (%llu bytes)\n", e.name.c_str(), *e.grid_error, e.rel_error,
                                    (unsigned long long)e.residual_bytes);
  }
  std::printf("ternary tensors: %.4f bits/weight (base %.4f + residual %.4f) over %lld weights\n",
              8.0 * double(base + extra) / double(n), 8.0 * double(base) / double(n), 8.0 * double(extra) / double(n),
              (long long)n);
  if (extra > 0)
    std::printf("note: residual tensors and bonsai.residual.* keys: this file loads only in bonsai "
                "(--residual none writes a pure PrismML file)\n");
  else if (std::any_of(r.errors.begin(), r.errors.end(), [](const auto& e) { return e.type == TypeId::PQ2_0; }))
    std::printf("PQ2_0 tensors in PrismML's layout (type 142), no bonsai-only tensors\n");
}

// Bytes of the residual tensors: beside the plan's blocks in the file, so in every bits/weight.
uint64_t residual_bytes(const quant::QuantizeResult& r) {
  uint64_t n = 0;
  for (const auto& e : r.errors) n += e.residual_bytes;
  return n;
}

void print_summary(const quant::QuantizeResult& r, const std::string& out) {
  std::printf("\nstages:%*s peak RSS at its end   peak anonymous in it\n", 42, "");
  double total = 0;
  for (const auto& st : r.stages) {
    std::printf("  %-38s %9.2f s  %12s  %12s\n", st.name.c_str(), st.seconds, human_bytes(double(st.peak_rss_bytes)).c_str(),
                st.peak_anon_bytes > 0 ? human_bytes(double(st.peak_anon_bytes)).c_str() : "-");
    total += st.seconds;
  }
  std::printf("  %-32s %9.2f s\n", "total", total);
  const auto& p = r.plan;
  const uint64_t rc = residual_bytes(r);
  std::printf("wrote %s: %s (tensor data %s), %.4f bits/weight over all weights, %.4f over the block linear weights%s\n",
              out.c_str(), human_bytes(double(r.file_bytes)).c_str(), human_bytes(double(p.total_bytes + rc)).c_str(),
              8.0 * double(p.total_bytes + rc) / double(p.total_elems),
              8.0 * double(p.block_linear_bytes + rc) / double(p.block_linear_elems),
              rc > 0 ? " (residual codebooks included)" : "");
  if (r.predicted_device_bytes > 0)
    std::printf("GPU: peak %s used by the job (free memory sampled at block ends and at gptq's peaks), predicted %s\n",
                human_bytes(double(r.peak_device_bytes)).c_str(), human_bytes(double(r.predicted_device_bytes)).c_str());
  std::printf("peak RSS %s (mapped files' pages included), peak anonymous memory %s (sampled every 20 ms), "
              "predicted %s%s%s\n",
              human_bytes(double(r.peak_rss_bytes)).c_str(), human_bytes(double(r.peak_anon_bytes)).c_str(),
              human_bytes(double(r.predicted_ram_bytes)).c_str(),
              r.spilled_bytes > 0 ? (", " + human_bytes(double(r.spilled_bytes)) + " of calibration buffers spilled").c_str() : "",
              r.stats_loaded ? "; statistics reused (no model forward)" : "");
  // Relative output error per weight kind: mean and worst, then the worst weights.
  struct Agg { double sum = 0, max = 0; int n = 0; std::string worst; };
  std::map<std::string, Agg> kinds;
  for (const auto& e : r.errors) {
    Agg& a = kinds[kind_of(e.name)];
    a.sum += e.rel_error;
    ++a.n;
    if (e.rel_error >= a.max) a.max = e.rel_error, a.worst = e.name;
  }
  std::printf("relative output error ‖X(W−Ŵ)ᵀ‖²/‖XWᵀ‖² by weight (%s):\n",
              !r.errors.empty() && r.errors[0].gram ? "Gram" : "importance-weighted");
  for (const auto& [k, a] : kinds)
    std::printf("  %-12s mean %.5f  max %.5f (%s)\n", k.c_str(), a.sum / a.n, a.max, a.worst.c_str());
  print_stage2(r);
  print_residual(r);
}

// The summary for scripts (scripts/results_stage1.sh): what print_summary says, as one object.
void print_summary_json(const quant::QuantizeResult& r, const quant::QuantizeOptions& o) {
  const auto& p = r.plan;
  nlohmann::ordered_json stages = nlohmann::ordered_json::object(), stage_rss = nlohmann::ordered_json::object(),
                         stage_anon = nlohmann::ordered_json::object();
  double total = 0;
  for (const auto& st : r.stages) {
    stages[st.name] = st.seconds;
    stage_rss[st.name] = st.peak_rss_bytes;
    stage_anon[st.name] = st.peak_anon_bytes;
    total += st.seconds;
  }
  nlohmann::ordered_json errors = nlohmann::ordered_json::object();
  for (const auto& e : r.errors) errors[e.name] = e.rel_error;
  print_json({{"source", o.source},
              {"output", o.output},
              {"plan", p.plan_name},
              {"method", o.method ? quant::method_name(*o.method) : "as the plan says"},
              {"rotate", o.rotate ? "hadamard" : "none"},
              {"rotate_block", o.rotate ? o.rotate_block : 0},
              {"calibrated", r.calibrated},
              {"stats_loaded", r.stats_loaded},
              {"calib_windows", o.calib_windows},
              {"calib_len", o.calib_len},
              {"seed", o.seed},
              {"gptq_passes", o.method_opts.gptq_passes},
              {"gptq_descent", o.method_opts.descent_rounds},
              {"tune_steps", o.method_opts.tune_steps},
              {"tune_lr", o.method_opts.tune_lr},
              {"file_bytes", r.file_bytes},
              {"bpw_all", 8.0 * double(p.total_bytes + residual_bytes(r)) / double(p.total_elems)},
              {"bpw_block_linear", 8.0 * double(p.block_linear_bytes + residual_bytes(r)) / double(p.block_linear_elems)},
              {"residual_bytes", residual_bytes(r)},
              {"seconds", total},
              {"stages", stages},
              {"stage_peak_rss_bytes", stage_rss},
              {"stage_peak_anon_bytes", stage_anon},
              {"peak_rss_bytes", r.peak_rss_bytes},
              {"peak_anon_bytes", r.peak_anon_bytes},
              {"predicted_ram_bytes", r.predicted_ram_bytes},
              {"spilled_bytes", r.spilled_bytes},
              {"device", o.device},
              {"peak_device_bytes", r.peak_device_bytes},
              {"predicted_device_bytes", r.predicted_device_bytes},
              {"rel_errors", errors}});
}

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  add_model(opts);
  opts.add_options()("out,o", po::value<std::string>(), "output: FILE.gguf or FILE.bonsai")(
      "plan", po::value<std::string>()->default_value(quant::kDefaultPlan),
      "plan: a preset name (ternary-all, ternary-keep-embed-head-q8, ternary-first3-last2-q8) or a YAML file")(
      "tensor-type", po::value<std::vector<std::string>>()->composing(),
      "REGEX=TYPE: tensors whose name matches REGEX get TYPE, after the plan's rules (repeatable, in order)")(
      "output-tensor-type", po::value<std::string>(), "type of output.weight, after the plan (untied models)")(
      "token-embedding-type", po::value<std::string>(), "type of token_embd.weight, after the plan")(
      "method", po::value<std::string>(),
      "ternary method where the plan's rules name none: rtn, absmean, optimal, gptq, tune (tune needs a build "
      "with LibTorch; default: the plan's, else gptq)")(
      "rotate", po::value<std::string>()->default_value("none"), "input rotation folded into the weights: none or hadamard")(
      "rotate-block", po::value<int64_t>()->default_value(128), "Hadamard block size (a power of two dividing every rotated width)")(
      "calib", po::value<std::vector<std::string>>()->multitoken(),
      "calibration text files (default: ../shared/corpora/zh/calib-*.txt, or $BONSAI_SHARED_DIR/corpora/zh)")(
      "calib-windows", po::value<int64_t>()->default_value(128), "calibration windows")(
      "calib-len", po::value<int64_t>()->default_value(512), "tokens per calibration window")(
      "stats", po::value<std::string>(),
      "statistics file: reused when it exists (no model forward), else written after calibrating")(
      "seed", po::value<uint64_t>()->default_value(0), "seed of the calibration windows and of the rotation's random signs")(
      "gptq-passes", po::value<int>()->default_value(quant::MethodOptions{}.gptq_passes),
      "gptq: GPTQ passes, each followed by a least-squares refit of the group scales; a pass after the first reruns "
      "GPTQ with the refitted scales fixed (stops early when a pass does not lower the output error)")(
      "gptq-descent", po::value<int>()->default_value(quant::MethodOptions{}.descent_rounds),
      "gptq: after the passes, rounds of coordinate descent on the codes (every code in turn moves to the level "
      "that lowers the output error most, scales fixed), each followed by the scale refit (0: none; stops early "
      "when a round moves no code or does not lower the error)")(
      "tune-steps", po::value<int>()->default_value(quant::MethodOptions{}.tune_steps),
      "tune: Adam steps from optimal's result (0: optimal's result as is)")(
      "tune-lr", po::value<double>()->default_value(quant::MethodOptions{}.tune_lr), "tune: Adam's learning rate")(
      "residual", po::value<std::string>()->default_value("none"),
      "stage-2 residual codebooks on the ternary tensors: none (a pure PrismML PQ2_0 file), kmeans or pattern. "
      "kmeans with gptq and --type pq2_0 fits the codebook with the base in the output metric (base codes and "
      "residual indices chosen in one GPTQ column loop; docs/results.md has the measured sizes and perplexities). "
      "A residual adds about ceil(log2 K)/V bits per weight and loads only in bonsai; on zh-tiny it beats the grid "
      "alone but `bonsai plan --budget` spends the same bits better, hence the default none")(
      "rc-dim", po::value<int64_t>()->default_value(8), "kmeans: inputs per sub-vector v (divides 128)")(
      "rc-size", po::value<int64_t>()->default_value(16), "kmeans: centroids per codebook K (2..65536)")(
      "rc-rows", po::value<int64_t>()->default_value(0), "kmeans: rows per codebook G (divides each tensor's rows; 0 = all)")(
      "from", po::value<std::string>(),
      "start stage 2 from this saved stage-1 result (same model, plan and rotation) instead of rerunning stage 1")(
      "type", po::value<std::string>(),
      "the plan's ternary tensors become this type: ptq1_0 (stage 1) or pq2_0 (stage 2: the four-level grid)")(
      "resume", po::bool_switch(),
      "continue the job a kill or an error interrupted, from the last block finished in OUT.partial/ (same inputs and "
      "options required; starts from the beginning when there is none)")(
      "restart", po::bool_switch(), "discard an interrupted job's OUT.partial/ and start over")(
      "max-memory", po::value<std::string>(),
      "RAM the job may take, e.g. 6G (default: what the machine has available). The job prints what it needs before "
      "it starts; calibration buffers beyond this spill to a file in OUT.partial/, and a job that cannot fit even so "
      "is refused before any work")(
      "dry-run", po::bool_switch(), "print the plan (tensor, type, method, bytes, totals) and exit");
  add_threads(opts);
  add_device(opts);
  add_json(opts);
  po::variables_map vm;
  if (!parse(args,
             "bonsai quantize -m SRC -o OUT.gguf|OUT.bonsai [--plan PRESET|FILE] [--method M] [--rotate hadamard "
             "--rotate-block B] [--calib FILE...] [--calib-windows N --calib-len L] [--stats FILE] [--seed S] [--gptq-passes N] [--tune-steps N --tune-lr X] [--type ptq1_0|pq2_0] [--residual none|kmeans|pattern --rc-dim V --rc-size K --rc-rows G] [--from STAGE1] [--tensor-type REGEX=TYPE...] [--threads N] [--device cpu|cuda[:N]] [--max-memory SIZE] [--resume|--restart] [--dry-run]",
             "Quantizes a model by a mixed-precision plan. Ternary tensors (PTQ1_0, PQ2_0) are fitted to\n"
             "activation statistics measured block by block on the calibration text (each block sees the\n"
             "outputs of the blocks already quantized); other types use their reference encoders. With\n"
             "--rotate hadamard, W·S·H is folded into every block's linear weights first (the runtime\n"
             "rotates their inputs back, prism.hadamard.*). A .bonsai output also records the plan, the\n"
             "sha256 of the source and of the calibration text, and each weight's relative output error.\n"
             "--tensor-type, --output-tensor-type and --token-embedding-type override the plan as\n"
             "llama-quantize's options do; the printed plan marks the tensors they decided.\n\n"
             "Memory does not grow with the model's depth: the source stays memory-mapped, each block\n"
             "weight is decoded when its turn comes, and finished blocks live in OUT.partial/ until the\n"
             "output is written from there. Before any work the job prints what it will need in RAM\n"
             "(one matrix's work, the calibration buffers) and refuses when the machine, or\n"
             "--max-memory, has less (docs/scale.md). --device cuda runs each block's calibration\n"
             "forward, its statistics and gptq's numerics on the GPU, one block at a time there, and\n"
             "refuses before any work a block that does not fit the device.\n\n"
             "Crash-safe: every finished block is kept in OUT.partial/ (checksummed, with the inputs and\n"
             "options it belongs to) and OUT appears, complete, only at the end. After a kill or an error,\n"
             "rerun the same command with --resume to continue from the last finished block; the result is\n"
             "byte for byte what an uninterrupted run writes. The output does not depend on --threads;\n"
             "SOURCE_DATE_EPOCH pins the date a .bonsai records (docs/reliability.md).\n\n"
             "examples:\n  bonsai quantize -m zh-tiny-qwen3/ -o zh-tiny-ptq1.gguf --rotate hadamard --stats zh-tiny.stats.gguf\n"
             "  bonsai quantize -m zh-tiny-qwen3/ -o mixed.gguf --tensor-type 'blk\\.0\\..*=q8_0' --token-embedding-type q4_0\n"
             "  bonsai quantize -m zh-tiny-qwen3/ -o zh-tiny-ptq1.gguf --rotate hadamard --resume   # after a kill",
             opts, {}, vm))
    return 0;
  quant::QuantizeOptions o;
  o.source = vm["model"].as<std::string>();
  o.device = vm["device"].as<std::string>();
  if (vm.count("max-memory")) try {
      o.max_memory = parse_byte_size(vm["max-memory"].as<std::string>(), "--max-memory");
    } catch (const Error& e) {
      throw po::error(e.what());  // a usage error (exit 2), as any other bad option value
    }
  o.dry_run = vm["dry-run"].as<bool>();
  if (vm.count("out")) o.output = vm["out"].as<std::string>();
  else if (!o.dry_run) throw po::error("the option '--out' is required but missing");
  o.plan = vm["plan"].as<std::string>();
  if (vm.count("tensor-type")) o.overrides.tensor_types = vm["tensor-type"].as<std::vector<std::string>>();
  if (vm.count("output-tensor-type")) o.overrides.output_type = vm["output-tensor-type"].as<std::string>();
  if (vm.count("token-embedding-type")) o.overrides.token_embd_type = vm["token-embedding-type"].as<std::string>();
  if (vm.count("method")) o.method = quant::parse_method(vm["method"].as<std::string>());
  const std::string rot = vm["rotate"].as<std::string>();
  if (rot != "none" && rot != "hadamard") throw po::error("--rotate must be none or hadamard (got '" + rot + "')");
  o.rotate = rot == "hadamard";
  o.rotate_block = vm["rotate-block"].as<int64_t>();
  if (vm.count("calib")) o.calib_files = vm["calib"].as<std::vector<std::string>>();
  o.calib_windows = vm["calib-windows"].as<int64_t>();
  o.calib_len = vm["calib-len"].as<int64_t>();
  if (o.calib_windows <= 0 || o.calib_len <= 0) throw po::error("--calib-windows and --calib-len must be positive");
  if (vm.count("stats")) o.stats_path = vm["stats"].as<std::string>();
  o.seed = vm["seed"].as<uint64_t>();
  o.method_opts.gptq_passes = vm["gptq-passes"].as<int>();
  o.method_opts.descent_rounds = vm["gptq-descent"].as<int>();
  o.method_opts.tune_steps = vm["tune-steps"].as<int>();
  o.method_opts.tune_lr = vm["tune-lr"].as<double>();
  if (vm.count("type")) {
    const std::string t = vm["type"].as<std::string>();
    const TypeTraits* tt = find_type(t);
    if (!tt || !quant::is_ternary(tt->id)) throw po::error("--type must be ptq1_0 or pq2_0 (got '" + t + "')");
    o.ternary_type = tt->id;
  }
  if (vm.count("from")) o.from = vm["from"].as<std::string>();
  o.residual.kind = quant::parse_residual(vm["residual"].as<std::string>());
  o.residual.dim = vm["rc-dim"].as<int64_t>();
  o.residual.size = vm["rc-size"].as<int64_t>();
  o.residual.rows = vm["rc-rows"].as<int64_t>();
  quant::validate_residual(o.residual);
  if (vm["resume"].as<bool>() && vm["restart"].as<bool>()) throw po::error("--resume and --restart exclude each other");
  o.partial = vm["resume"].as<bool>()    ? quant::PartialMode::resume
              : vm["restart"].as<bool>() ? quant::PartialMode::restart
                                         : quant::PartialMode::fresh;

  // With --json the log goes to stderr so stdout holds only the JSON object.
  const bool json = vm["json"].as<bool>();
  FILE* log = json ? stderr : stdout;
  quant::QuantizeEvents ev;
  ev.info = [log](const std::string& s) { std::fprintf(log, "%s%s", s.c_str(), s.ends_with('\n') ? "" : "\n"); std::fflush(log); };
  ev.block_done = [](const calib::BlockDone& b) {
    Progress(b.what, b.n_blocks)
        .update(b.block + 1, b.seconds,
                "peak RSS " + human_bytes(double(b.peak_rss_bytes)) + ", anonymous now " + human_bytes(double(anon_rss_bytes())));
  };
  const quant::QuantizeResult r = quant::quantize_model(o, ev);
  if (o.dry_run) return 0;
  if (json)
    print_summary_json(r, o);
  else
    print_summary(r, o.output);
  return 0;
}

const Registrar reg({"quantize", "quantize a model by a plan (calibrated ternary PTQ1_0 / PQ2_0)", run});

}  // namespace
}  // namespace bonsai::cli
