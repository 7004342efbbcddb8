#include "runtime/transformer.h"

#include <algorithm>

#include "formats/error.h"

namespace bonsai {

Session::Session(const Model& model, Backend& backend, int64_t n_ctx, int64_t n_batch)
    : m_(model), be_(backend), n_ctx_(n_ctx), n_batch_(std::min(n_batch, n_ctx)) {
  const ModelConfig& c = m_.cfg;
  const int64_t q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    k_cache_.push_back(be_.alloc_kv(n_ctx_, c.n_head_kv, c.head_dim));
    v_cache_.push_back(be_.alloc_kv(n_ctx_, c.n_head_kv, c.head_dim));
  }
  const int64_t nb = n_batch_;
  x_ = be_.alloc(nb * c.n_embd);
  xn_ = be_.alloc(nb * c.n_embd);
  q_ = be_.alloc(nb * q_dim);
  k_ = be_.alloc(nb * kv_dim);
  v_ = be_.alloc(nb * kv_dim);
  att_ = be_.alloc(nb * q_dim);
  g_ = be_.alloc(nb * c.n_ff);
  u_ = be_.alloc(nb * c.n_ff);
  tmp_ = be_.alloc(nb * std::max({c.n_embd, c.n_ff, q_dim}));
  logits_ = be_.alloc(nb * c.n_vocab);
}

float* Session::product_input(const Tensor& w, float* x, int64_t n, float* scratch) {
  if (m_.hadamard.empty() || !m_.hadamard.rotates(w.name)) return x;
  // Rotate a copy: x is shared by the other weights that read the same input (q/k/v, gate/up).
  be_.copy(x, scratch, n * w.ne[0]);
  be_.hadamard(m_.hadamard, scratch, n, w.ne[0], false);
  return scratch;
}

void Session::linear_shared(std::initializer_list<std::pair<const Tensor*, float*>> products, float* x, int64_t n,
                            float* scratch) {
  // One backend call where nothing happens between the products: no rotated input, no residual
  // codebooks, no observer (those go per weight, through linear).
  constexpr size_t kMax = 3;
  const Tensor* w[kMax];
  float* y[kMax];
  int count = 0;
  bool plain = !observer_ && products.size() <= kMax;
  for (const auto& [t, out] : products) {
    plain = plain && (m_.hadamard.empty() || !m_.hadamard.rotates(t->name)) && !m_.residuals.count(t);
    if (plain) {
      w[count] = t;
      y[count++] = out;
    }
  }
  if (plain) return be_.matmul_shared(w, y, count, x, n);
  for (const auto& [t, out] : products) linear(*t, x, n, out, scratch);
}

void Session::linear(const Tensor& w, float* x, int64_t n, float* y, float* scratch) {
  x = product_input(w, x, n, scratch);
  if (observer_) observer_(w, x, n);
  be_.matmul(w, x, n, y);
  if (const auto it = m_.residuals.find(&w); it != m_.residuals.end()) be_.matmul_residual(it->second, x, n, y);
}

int64_t Session::block_input_width(int group) const { return block_input_width(m_.cfg, group); }

int64_t Session::block_input_width(const ModelConfig& c, int group) {
  switch (group) {
    case 0: case 2: return c.n_embd;
    case 1: return c.n_head * c.head_dim;
    case 3: return c.n_ff;
    default: throw Error(cat("block input ", group, " does not exist (a block has four: 0..3)"));
  }
}

void Session::run_block_step(int64_t l, int step, float* x, float* in, float* out, int64_t n) {
  if (n > n_batch_) throw Error(cat("run_block_step of ", n, " tokens exceeds the batch size ", n_batch_));
  if (l < 0 || l >= m_.cfg.n_layer || step < 0 || step >= kBlockSteps)
    throw Error(cat("block ", l, " step ", step, " does not exist (", m_.cfg.n_layer, " blocks of ", kBlockSteps,
                    " steps)"));
  pos_ = 0;
  block_step(l, step, x, in, out, n);
  pos_ = 0;
}

void Session::observe_group(int64_t l, int group, float* in, int64_t n, const LinearObserver& f) {
  if (group < 0 || group > 3) throw Error(cat("block input ", group, " does not exist (a block has four: 0..3)"));
  const LayerWeights& w = m_.layers[size_t(l)];
  const Tensor& t = *w.group_inputs()[size_t(group)];
  f(t, product_input(t, in, n, tmp_), n);
}

void Session::block(int64_t l, float* x, int64_t n) {
  block_step(l, 0, x, nullptr, xn_, n);
  block_step(l, 1, x, xn_, att_, n);
  block_step(l, 2, x, att_, xn_, n);
  block_step(l, 3, x, xn_, g_, n);
  block_step(l, 4, x, g_, nullptr, n);
}

void Session::block_step(int64_t l, int step, float* x, float* in, float* out, int64_t n) {
  const ModelConfig& c = m_.cfg;
  const int64_t kv_dim = c.n_head_kv * c.head_dim;
  const LayerWeights& w = m_.layers[size_t(l)];
  switch (step) {
    case 0:  // the attention input
      be_.rmsnorm(x, w.attn_norm, n, c.n_embd, c.rms_eps, out);
      return;
    case 1:  // q/k/v and attention over this sequence's cache: the output projection's input
      linear_shared({{w.wq, q_}, {w.wk, k_}, {w.wv, v_}}, in, n, tmp_);
      if (c.qkv_bias) {
        be_.add_bias(q_, w.bias_q, n);
        be_.add_bias(k_, w.bias_k, n);
        be_.add_bias(v_, w.bias_v, n);
      }
      if (c.qk_norm) {
        be_.rmsnorm(q_, w.q_norm, n * c.n_head, c.head_dim, c.rms_eps, q_);
        be_.rmsnorm(k_, w.k_norm, n * c.n_head_kv, c.head_dim, c.rms_eps, k_);
      }
      be_.rope(q_, n, c.n_head, c.head_dim, c.n_rot, pos_, c.rope_base, c.rope_neox);
      be_.rope(k_, n, c.n_head_kv, c.head_dim, c.n_rot, pos_, c.rope_base, c.rope_neox);
      be_.store_kv(k_, k_cache_[size_t(l)], pos_, n, kv_dim);
      be_.store_kv(v_, v_cache_[size_t(l)], pos_, n, kv_dim);
      be_.attention(q_, k_cache_[size_t(l)], v_cache_[size_t(l)], n, pos_, c.n_head, c.n_head_kv, c.head_dim, out);
      return;
    case 2:  // the attention output added to x; the feed-forward input (out holds wo·in first)
      linear(*w.wo, in, n, out, tmp_);
      be_.add(x, out, n * c.n_embd);
      be_.rmsnorm(x, w.ffn_norm, n, c.n_embd, c.rms_eps, out);
      return;
    case 3:  // SwiGLU: the down projection's input
      linear_shared({{w.gate, out}, {w.up, u_}}, in, n, tmp_);
      be_.silu_mul(out, u_, n * c.n_ff);
      return;
    case 4:  // the feed-forward output added to x (xn_ is free here: block() passes g_ as in)
      linear(*w.down, in, n, xn_, tmp_);
      be_.add(x, xn_, n * c.n_embd);
      return;
  }
}

void Session::eval(const int32_t* ids, int64_t n, int64_t logits_from, float* logits) {
  const ModelConfig& c = m_.cfg;
  if (n <= 0) return;
  if (n > n_batch_) throw Error(cat("eval of ", n, " tokens exceeds the batch size ", n_batch_));
  if (pos_ + n > n_ctx_) throw Error(cat("context full: ", pos_ + n, " tokens > n_ctx ", n_ctx_));
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.n_vocab) throw Error(cat("token id ", ids[i], " is outside the vocabulary (", c.n_vocab, ")"));

  be_.begin_step(pos_, n);
  be_.embed(*m_.token_embd, ids, n, x_);
  if (m_.hadamard.inverse_weights.count(m_.token_embd->name)) be_.hadamard(m_.hadamard, x_, n, c.n_embd, true);

  for (int64_t l = 0; l < c.n_layer; ++l) block(l, x_, n);
  if (logits_from < n) head(n, logits_from);
  be_.end_step();
  pos_ += n;
  if (logits_from < n) be_.to_host(logits_, logits, (n - logits_from) * c.n_vocab);
}

void Session::head(int64_t n, int64_t logits_from) {
  const ModelConfig& c = m_.cfg;
  const int64_t rows = n - logits_from;
  float* xl = x_ + logits_from * c.n_embd;
  be_.rmsnorm(xl, m_.output_norm, rows, c.n_embd, c.rms_eps, xn_);
  const bool tied_rotated = m_.output == m_.token_embd && m_.hadamard.inverse_weights.count(m_.token_embd->name);
  if (tied_rotated) {
    be_.hadamard(m_.hadamard, xn_, rows, c.n_embd, false);
    be_.matmul(*m_.output, xn_, rows, logits_);
  } else {
    linear(*m_.output, xn_, rows, logits_, tmp_);
  }
}

}  // namespace bonsai
