// The forward pass, written once for every backend: a session holds the KV cache of one
// sequence and evaluates batches of tokens (llama2.c's run.c shape, batched).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>
#include <vector>

#include "runtime/backend.h"
#include "runtime/model.h"

namespace bonsai {

class Session {
 public:
  // n_ctx: the longest sequence; n_batch: the most tokens one eval() takes.
  Session(const Model& model, Backend& backend, int64_t n_ctx, int64_t n_batch);

  // Evaluates ids[0..n) at positions pos()..pos()+n and advances pos(). Writes the logits of
  // rows [logits_from, n) to `logits` (host, (n - logits_from) * n_vocab floats); none when
  // logits_from >= n.
  void eval(const int32_t* ids, int64_t n, int64_t logits_from, float* logits);
  int64_t pos() const { return pos_; }
  void reset() { pos_ = 0; }
  // Back to position p <= pos(): the next eval continues from p, overwriting the cache there, so
  // several continuations of one prefix (a multiple-choice task's answers) share its evaluation.
  void rewind(int64_t p) { pos_ = std::min(pos_, std::max<int64_t>(p, 0)); }
  int64_t n_ctx() const { return n_ctx_; }

  // Calibration: called with the input every matrix product sees (n rows of w.ne[0] floats, after
  // the Hadamard rotation when the file rotates w), before the product.
  using LinearObserver = std::function<void(const Tensor& w, const float* x, int64_t n)>;
  void set_observer(LinearObserver f) { observer_ = std::move(f); }

  // Calibration in GPTQ's true-sequential order: block l as five steps between the inputs of its
  // four groups of matrix products (0: q/k/v, 1: attention output, 2: gate/up, 3: down), over a
  // fresh sequence of n tokens (positions 0..n-1). Step 0 forms input 0 from the residual stream
  // x into `out`; step g = 1..3 runs group g−1's products on `in` (input g−1) and forms input g in
  // `out`; step 4 runs the down projection on `in` and adds it to x (`out` unused). Buffers are
  // backend memory of n rows, input g having block_input_width(g) floats a row; `in` and `out`
  // must differ. The forward pass runs the same steps, so the two cannot disagree.
  static constexpr int kBlockSteps = 5;
  void run_block_step(int64_t l, int step, float* x, float* in, float* out, int64_t n);
  int64_t block_input_width(int group) const;
  static int64_t block_input_width(const ModelConfig& c, int group);
  // Calls f once with group g's first weight and what its products see of `in` (input g, n rows;
  // rotated when the file rotates them): that group's calibration statistics.
  void observe_group(int64_t l, int group, float* in, int64_t n, const LinearObserver& f);

 private:
  // y = W x, with the Hadamard transform on x first when the file rotated W.
  void linear(const Tensor& w, float* x, int64_t n, float* y, float* scratch);
  // linear for weights that read the same x ({weight, its y}): one Backend::matmul_shared call
  // when none needs its own step (a rotated input, residual codebooks, an observer).
  void linear_shared(std::initializer_list<std::pair<const Tensor*, float*>> products, float* x, int64_t n,
                     float* scratch);
  // What W's product sees of x: x, or its rotated copy in `scratch` when the file rotated W.
  float* product_input(const Tensor& w, float* x, int64_t n, float* scratch);
  // Block l on x (n tokens at positions pos_..), updating the KV cache: the five steps in order.
  void block(int64_t l, float* x, int64_t n);
  void block_step(int64_t l, int step, float* x, float* in, float* out, int64_t n);
  // Final norm and output head of rows [logits_from, n) of x_ into logits_ (backend memory).
  void head(int64_t n, int64_t logits_from);

  const Model& m_;
  Backend& be_;
  int64_t n_ctx_, n_batch_, pos_ = 0;
  std::vector<void*> k_cache_, v_cache_;  // per layer, [n_ctx][kv_dim] in the backend's cache type
  float *x_, *xn_, *q_, *k_, *v_, *att_, *g_, *u_, *tmp_, *logits_;
  LinearObserver observer_;
};

}  // namespace bonsai
