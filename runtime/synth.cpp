#include "runtime/synth.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "formats/atomic_file.h"
#include "formats/error.h"
#include "formats/hf_model.h"
#include "formats/fp16.h"
#include "formats/model_file.h"
#include "formats/residual.h"

namespace bonsai {

namespace {

struct Preset {
  const char* arch;
  const char* size;
  int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
  bool tied;
};

// Shapes of the published Qwen3 models (their config.json), and a tiny one for tests.
constexpr Preset kPresets[] = {
    {"qwen3", "tiny", 256, 2, 4, 2, 64, 768, 151936, true},
    {"qwen3", "0.6b", 1024, 28, 16, 8, 128, 3072, 151936, true},
    {"qwen3", "1.7b", 2048, 28, 16, 8, 128, 6144, 151936, true},
    {"qwen3", "4b", 2560, 36, 32, 8, 128, 9728, 151936, true},
    {"qwen3", "8b", 4096, 36, 32, 8, 128, 12288, 151936, false},
    {"qwen3", "14b", 5120, 40, 40, 8, 128, 17408, 151936, false},
    {"qwen3", "32b", 5120, 64, 64, 8, 128, 25600, 151936, false},
};

// Rows are generated into one buffer of at most this many bytes (at least one row) and written
// from it: synth's memory, whatever the model's size.
constexpr uint64_t kChunkBytes = uint64_t(16) << 20;

// A small counter-based generator: each row's values depend only on (seed, tensor, row), so the
// output is the same for any thread count.
uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Uniform in [0, 1) from the stream (seed, tensor, row) at position i: each row on its own, so the
// output is the same for any thread count.
struct RowStream {
  uint64_t state;
  RowStream(uint64_t seed, uint64_t tensor, uint64_t row) : state(mix(seed * 0x9E3779B97F4A7C15ULL ^ (tensor << 40) ^ row)) {}
  float next() {
    state = mix(state + 0x9E3779B97F4A7C15ULL);
    return float(state >> 40) * (1.0f / 16777216.0f);
  }
};

// The checks that need no tensor, before anything is generated.
void check_residual_options(const SynthOptions& o) {
  if (!o.residual) return;
  if (o.type != TypeId::PQ2_0)
    throw Error(cat("synth: --residual needs --type pq2_0 (residual codebooks refine a PQ2_0 base; got ",
                    traits(o.type).name, ")"));
  if (const std::string p = kmeans_options_problem(o.rc_dim, o.rc_size, o.rc_rows); !p.empty())
    throw Error(cat("synth: ", p));
}

// The shape of the kmeans residual of `base`, its arrays empty: what the file's table holds
// before the residual is drawn. Error when --rc-rows does not divide the base's rows.
ResidualData residual_shape(const SynthOptions& o, const Tensor& base) {
  const int64_t rows = base.ne[1];
  const int64_t g = o.rc_rows == 0 ? rows : o.rc_rows;
  if (rows % g != 0)
    throw Error(cat("synth: --rc-rows ", o.rc_rows, " does not divide the ", rows, " rows of '", base.name, "'"));
  ResidualData d;
  d.scheme = ResidualScheme::kmeans;
  d.dim = o.rc_dim;
  d.size = o.rc_size;
  d.books = rows / g;
  return d;
}

// A random kmeans residual of `base`: centroids uniform in ±kResidualAmp (the size of the
// residual a ternary base leaves of std-0.02 weights), indices uniform over the codebook. The
// streams are tensor ids past the model's own (1 << 20 + base id) so the base weights stay those
// of the same model without a residual.
constexpr float kResidualAmp = 0.005f;

ResidualData random_residual(const SynthOptions& o, const Tensor& base, uint64_t base_id) {
  const int64_t rows = base.ne[1], per_row = base.ne[0] / o.rc_dim;
  ResidualData d = residual_shape(o, base);
  const uint64_t id = (uint64_t{1} << 20) + base_id;
  d.codebook.resize(size_t(d.books * d.size * d.dim));
  RowStream cs(o.seed, id, uint64_t(1) << 39);
  for (auto& h : d.codebook) h = f32_to_fp16(kResidualAmp * (2.0f * cs.next() - 1.0f));
  const int bits = index_bits(d.size);
  const uint64_t rb = index_row_bytes(per_row, bits);
  d.index.resize(size_t(rb * uint64_t(rows)));
#pragma omp parallel
  {
    std::vector<uint32_t> idx(static_cast<size_t>(per_row));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      RowStream rs(o.seed, id, uint64_t(r));
      for (auto& i : idx) i = std::min(uint32_t(rs.next() * float(d.size)), uint32_t(d.size - 1));
      pack_indices(idx.data(), per_row, bits, d.index.data() + uint64_t(r) * rb);
    }
  }
  return d;
}

// One weight of the model (architecture_tensors' order) and where its bytes go.
struct Weight {
  Tensor t;            // its table entry: name, type, shape, nbytes (no data)
  uint64_t id = 0;     // its random stream: the index in architecture_tensors
  bool matrix = false; // uniform values; else (norms) ones
  size_t at = 0;       // its index in the file's table
  bool residual = false;  // a residual follows it in the table
};

TypeId type_of(const SynthOptions& o, const TensorSpec& s) {
  return !s.matrix ? TypeId::F32
         : s.name == "token_embd.weight" ? o.embd_type
         : s.name == "output.weight"     ? o.output_type
                                         : o.type;
}

// The weights and the file's table (each weight, then its residual when it has one), every size
// checked: Error naming the output for a tensor its type cannot hold.
std::vector<Weight> plan_weights(const SynthOptions& o, const ModelConfig& c, bool tied, const std::string& out,
                                 std::vector<Tensor>& table) {
  const auto specs = architecture_tensors(c, tied);
  std::vector<Weight> ws;
  for (size_t ti = 0; ti < specs.size(); ++ti) {
    const TensorSpec& s = specs[ti];
    Weight w;
    w.t.name = s.name;
    w.t.ne = s.ne;
    w.t.type = type_of(o, s);
    const auto bytes = tensor_bytes(w.t.type, w.t.ne);
    if (!bytes) fail(out, "tensor '", w.t.name, "' ", w.t.shape_str(), " cannot be stored as ", traits(w.t.type).name);
    w.t.nbytes = *bytes;
    w.id = ti;
    w.matrix = s.matrix;
    w.at = table.size();
    // The block weights (the matrices in o.type) get their residual right after them, as the
    // quantizer writes it.
    w.residual = o.residual && s.matrix && s.name != "token_embd.weight" && s.name != "output.weight";
    table.push_back(w.t);
    if (w.residual)
      for (const Tensor& e : residual_shape(o, w.t).view(w.t)) table.push_back(e);
    ws.push_back(std::move(w));
  }
  return ws;
}

// Rows [first, first + n) of weight w into `out`: each row from its own stream.
void fill_rows(const SynthOptions& o, const Weight& w, int64_t first, int64_t n, uint8_t* out) {
  const int64_t cols = w.t.ne[0];
  const uint64_t rb = *row_bytes(w.t.type, uint64_t(cols));
  const TypeTraits& tt = traits(w.t.type);
  // Norms are 1 (as initialised models have); matrices uniform with std 0.02.
  const float amp = 0.02f * std::sqrt(3.0f);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = first; r < first + n; ++r) {
      RowStream rs(o.seed, w.id, uint64_t(r));
      for (int64_t i = 0; i < cols; ++i) {
        const float u = rs.next();
        row[size_t(i)] = w.matrix ? amp * (2.0f * u - 1.0f) : 1.0f;
      }
      tt.from_float(row.data(), out + uint64_t(r - first) * rb, cols);
    }
  }
}

// Synth's own buffers at most (SynthPlan::memory_bytes).
uint64_t memory_bound(const std::vector<Weight>& ws, const std::vector<Tensor>& table, uint64_t head_bytes) {
  uint64_t chunk = 0, residual = 0, rows = 0;
  for (const Weight& w : ws) {
    const uint64_t rb = w.t.nbytes / uint64_t(std::max<int64_t>(w.t.rows(), 1));
    chunk = std::max(chunk, std::min(w.t.nbytes, std::max(rb, kChunkBytes / std::max<uint64_t>(rb, 1) * rb)));
    rows = std::max(rows, uint64_t(w.t.ne[0]) * sizeof(float) * uint64_t(omp_get_max_threads()));
    if (w.residual) residual = std::max(residual, table[w.at + 1].nbytes + table[w.at + 2].nbytes);
  }
  return chunk + rows + residual + 2 * head_bytes;
}

}  // namespace

std::vector<std::string> synth_sizes(const std::string& arch) {
  std::vector<std::string> v;
  for (const auto& p : kPresets)
    if (arch == p.arch) v.push_back(p.size);
  return v;
}

ModelConfig synth_config(const std::string& arch, const std::string& size, bool* tied) {
  for (const auto& p : kPresets) {
    if (arch != p.arch || size != p.size) continue;
    // Written as the config.json it comes from, read as --config reads one: one mapping.
    HfConfig hf;
    hf.arch = arch;
    hf.hidden_size = p.n_embd;
    hf.intermediate_size = p.n_ff;
    hf.num_layers = p.n_layer;
    hf.num_heads = p.n_head;
    hf.num_kv_heads = p.n_head_kv;
    hf.head_dim = p.head_dim;
    hf.vocab_size = p.n_vocab;
    hf.max_position_embeddings = 40960;
    hf.rms_norm_eps = 1e-6;
    hf.rope_theta = 1e6;
    hf.tie_word_embeddings = p.tied;
    *tied = p.tied;
    return model_config(hf);
  }
  std::string known;
  for (const auto& s : synth_sizes(arch)) known += (known.empty() ? "" : ", ") + s;
  throw Error(cat("synth: no size '", size, "' for architecture '", arch, "'",
                  known.empty() ? std::string(" (known architectures: qwen3)") : " (known: " + known + ")"));
}

ModelConfig synth_config(const SynthOptions& o, bool* tied) {
  if (o.config.empty()) return synth_config(o.arch, o.size, tied);
  // A model folder stands for the config.json in it, as the Hugging Face reader takes folders.
  std::error_code ec;
  const bool folder = std::filesystem::is_directory(o.config, ec);
  const HfConfig hf = read_hf_config(folder ? (std::filesystem::path(o.config) / "config.json").string() : o.config);
  *tied = hf.tie_word_embeddings;
  return model_config(hf);
}

void synth_model(const SynthOptions& o, const std::string& out, const SynthHooks& hooks) {
  check_residual_options(o);
  bool tied = false;
  const ModelConfig c = synth_config(o, &tied);
  SynthPlan plan;
  plan.model = o.config.empty() ? o.arch + "-" + o.size : c.arch + " from " + o.config;
  Metadata meta;
  write_model_config(c, meta);
  meta.set_str("general.name", "synthetic " + plan.model +
                                   (o.residual ? " (random weights and residual codebooks)" : " (random weights)"));
  meta.set_bool("bonsai.synthetic", true);
  meta.set_u32("general.quantization_version", 2);
  meta.set_u32("general.file_type", llama_file_type(o.type));
  if (!o.tokenizer.empty()) add_hf_tokenizer(o.tokenizer, c.n_vocab, meta);
  if (o.residual) write_residual_keys(ResidualScheme::kmeans, o.rc_dim, o.rc_size, o.rc_rows, meta);

  // Everything is planned and checked before the output is created: the writer lays the file out
  // from the table, so its size is known, and a file that cannot fit is refused with nothing made.
  std::vector<Tensor> table;
  const std::vector<Weight> weights = plan_weights(o, c, tied, out, table);
  const auto writer = open_model_writer(out, meta, table);
  plan.tensors = table.size();
  plan.file_bytes = writer->file_bytes();
  for (const Tensor& t : table) plan.data_bytes += t.nbytes;
  plan.memory_bytes = memory_bound(weights, table, writer->head_bytes());
  plan.available_bytes = hooks.available ? hooks.available(out) : available_bytes(out);
  if (hooks.plan) hooks.plan(plan);
  require_space(out, plan.file_bytes, plan.available_bytes);

  uint64_t done = 0;
  auto report = [&](uint64_t at) {
    if (hooks.progress) hooks.progress(at, plan.data_bytes);
  };
  for (const Weight& w : weights) {
    const uint64_t rb = w.t.nbytes / uint64_t(std::max<int64_t>(w.t.rows(), 1));
    writer->write_rows(
        w.at,
        [&](int64_t first, int64_t n, uint8_t* buf) {
          report(done + uint64_t(first) * rb);
          fill_rows(o, w, first, n, buf);
        },
        kChunkBytes);
    done += w.t.nbytes;
    if (w.residual) {
      const ResidualData d = random_residual(o, w.t, w.id);
      for (const Tensor& e : d.view(w.t)) {
        writer->write(e.data, e.nbytes);
        done += e.nbytes;
      }
    }
    report(done);
  }
  writer->commit();
}

}  // namespace bonsai
