#include "runtime/synth.h"

#include <algorithm>
#include <cmath>

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
};

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

// A random kmeans residual of `base`: centroids uniform in ±kResidualAmp (the size of the
// residual a ternary base leaves of std-0.02 weights), indices uniform over the codebook. The
// streams are tensor ids past the model's own (1 << 20 + base id) so the base weights stay those
// of the same model without a residual.
constexpr float kResidualAmp = 0.005f;

ResidualData random_residual(const SynthOptions& o, const Tensor& base, uint64_t base_id) {
  const int64_t rows = base.ne[1], per_row = base.ne[0] / o.rc_dim;
  const int64_t g = o.rc_rows == 0 ? rows : o.rc_rows;
  if (rows % g != 0)
    throw Error(cat("synth: --rc-rows ", o.rc_rows, " does not divide the ", rows, " rows of '", base.name, "'"));
  ResidualData d;
  d.scheme = ResidualScheme::kmeans;
  d.dim = o.rc_dim;
  d.size = o.rc_size;
  d.books = rows / g;
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
    ModelConfig c;
    c.arch = arch;
    c.n_embd = p.n_embd;
    c.n_layer = p.n_layer;
    c.n_head = p.n_head;
    c.n_head_kv = p.n_head_kv;
    c.head_dim = p.head_dim;
    c.n_rot = p.head_dim;
    c.n_ff = p.n_ff;
    c.n_vocab = p.n_vocab;
    c.n_ctx_train = 40960;
    c.rms_eps = 1e-6f;
    c.rope_base = 1e6f;
    c.rope_neox = true;
    c.qk_norm = true;
    *tied = p.tied;
    return c;
  }
  std::string known;
  for (const auto& s : synth_sizes(arch)) known += (known.empty() ? "" : ", ") + s;
  throw Error(cat("synth: no size '", size, "' for architecture '", arch, "'",
                  known.empty() ? std::string(" (known architectures: qwen3)") : " (known: " + known + ")"));
}

void synth_model(const SynthOptions& o, const std::string& out, const std::function<void(size_t, size_t)>& progress) {
  check_residual_options(o);
  bool tied = false;
  const ModelConfig c = synth_config(o.arch, o.size, &tied);
  TensorSet ts;
  ts.path = out;
  write_model_config(c, ts.meta);
  ts.meta.set_str("general.name", "synthetic " + o.arch + "-" + o.size +
                                       (o.residual ? " (random weights and residual codebooks)" : " (random weights)"));
  ts.meta.set_bool("bonsai.synthetic", true);
  ts.meta.set_u32("general.quantization_version", 2);
  ts.meta.set_u32("general.file_type", llama_file_type(o.type));
  if (!o.tokenizer.empty()) add_hf_tokenizer(o.tokenizer, c.n_vocab, ts.meta);
  if (o.residual) write_residual_keys(ResidualScheme::kmeans, o.rc_dim, o.rc_size, o.rc_rows, ts.meta);

  const auto specs = architecture_tensors(c, tied);
  for (size_t ti = 0; ti < specs.size(); ++ti) {
    const TensorSpec& s = specs[ti];
    Tensor t;
    t.name = s.name;
    t.ne = s.ne;
    t.type = !s.matrix ? TypeId::F32
             : s.name == "token_embd.weight" ? o.embd_type
             : s.name == "output.weight"     ? o.output_type
                                             : o.type;
    const auto bytes = tensor_bytes(t.type, t.ne);
    if (!bytes) fail(out, "tensor '", t.name, "' ", t.shape_str(), " cannot be stored as ", traits(t.type).name);
    t.nbytes = *bytes;
    uint8_t* data = ts.alloc(t.nbytes);
    t.data = data;
    const int64_t cols = t.ne[0], rows = t.rows();
    const uint64_t rb = *row_bytes(t.type, uint64_t(cols));
    const TypeTraits& tt = traits(t.type);
    // Norms are 1 (as initialised models have); matrices uniform with std 0.02.
    const float amp = 0.02f * std::sqrt(3.0f);
#pragma omp parallel
    {
      std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        RowStream rs(o.seed, uint64_t(ti), uint64_t(r));
        for (int64_t i = 0; i < cols; ++i) {
          const float u = rs.next();
          row[size_t(i)] = s.matrix ? amp * (2.0f * u - 1.0f) : 1.0f;
        }
        tt.from_float(row.data(), data + uint64_t(r) * rb, cols);
      }
    }
    // The block weights (the matrices in o.type) get their residual right after them, as the
    // quantizer writes it.
    const bool block_weight = s.matrix && s.name != "token_embd.weight" && s.name != "output.weight";
    std::vector<Tensor> extra;
    if (o.residual && block_weight) extra = random_residual(o, t, uint64_t(ti)).tensors(t, ts);
    ts.add(std::move(t));
    for (Tensor& e : extra) ts.add(std::move(e));
    if (progress) progress(ti + 1, specs.size());
  }
  write_model(out, ts.meta, ts.tensors);
}

}  // namespace bonsai
