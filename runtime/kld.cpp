#include "runtime/kld.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "formats/atomic_file.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/parallel.h"

namespace bonsai {

namespace {

// Version 2: both layouts, the chunk counts; a version-1 file (top-k only) is refused by name.
constexpr char kMagic[8] = {'B', 'O', 'N', 'S', 'K', 'L', 'D', '2'};
constexpr uint64_t kHead = sizeof kMagic + 6 * 8 + 8;
constexpr uint64_t kRecordHead = 16;  // int32 next, float logp_next, float a, float b
constexpr float kFullRange = 64.0f;   // nats below the most probable token that the codes span

// One position into `rec` in the layout of h.k.
void encode(const float* logits, double log_z, int64_t n_vocab, int64_t k, int32_t next, std::vector<uint8_t>& rec) {
  float mxf = logits[0];
  for (int64_t v = 1; v < n_vocab; ++v) mxf = std::max(mxf, logits[v]);
  const double mx = mxf;
  rec.assign(kld_record_bytes(n_vocab, k), 0);
  const float logp_next = float(double(logits[next]) - log_z);
  float a = 0, b = 0;
  uint8_t* body = rec.data() + kRecordHead;
  if (k == 0) {
    float lo = logits[0];
    for (int64_t v = 1; v < n_vocab; ++v) lo = std::min(lo, logits[v]);
    const double range = std::min(double(kFullRange), mx - double(lo));
    const float lmax = float(mx - log_z), step = range > 0 ? float(range / 65535.0) : 1.0f;
    auto* code = reinterpret_cast<uint16_t*>(body);
    for (int64_t v = 0; v < n_vocab; ++v) {
      const double c = std::round((mx - double(logits[v])) / double(step));
      code[v] = uint16_t(std::clamp(c, 0.0, 65535.0));
    }
    a = lmax, b = step;
  } else {
    std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t x, int32_t y) {
      return logits[x] > logits[y] || (logits[x] == logits[y] && x < y);
    });
    auto* ids = reinterpret_cast<int32_t*>(body);
    auto* logp = reinterpret_cast<float*>(body + k * 4);
    double kept = 0;
    for (int64_t i = 0; i < k; ++i) {
      const double lp = double(logits[idx[size_t(i)]]) - log_z;
      ids[i] = idx[size_t(i)];
      logp[i] = float(lp);
      kept += std::exp(lp);
    }
    const double rest = 1.0 - kept;
    a = k == n_vocab || rest <= 0 ? -std::numeric_limits<float>::infinity() : float(std::log(rest));
  }
  std::memcpy(rec.data(), &next, 4);
  std::memcpy(rec.data() + 4, &logp_next, 4);
  std::memcpy(rec.data() + 8, &a, 4);
  std::memcpy(rec.data() + 12, &b, 4);
}

void write_header(uint8_t* out, const KldHeader& h, int64_t positions) {
  std::memcpy(out, kMagic, sizeof kMagic);
  const int64_t v[6] = {h.n_vocab, h.n_ctx, h.chunks, h.kl_chunks, h.k, positions};
  std::memcpy(out + sizeof kMagic, v, sizeof v);
  std::memcpy(out + sizeof kMagic + sizeof v, &h.tokens_hash, 8);
}

}  // namespace

uint64_t kld_record_bytes(int64_t n_vocab, int64_t k) {
  if (k == 0) return kRecordHead + (uint64_t(n_vocab) * 2 + 3) / 4 * 4;
  return kRecordHead + uint64_t(k) * 8;
}

uint64_t kld_file_bytes(int64_t n_vocab, int64_t k, int64_t positions, int64_t all) {
  return kHead + uint64_t(positions) * kld_record_bytes(n_vocab, k) + uint64_t(all) * 4;
}

uint64_t kld_base_bytes(const KldHeader& h, int64_t chunks, int64_t kl_chunks) {
  const int64_t per = scored_per_chunk(h.n_ctx);
  return kld_file_bytes(h.n_vocab, h.k, kld_kept_chunks(chunks, kl_chunks) * per, chunks * per);
}

uint64_t hash_tokens(const std::vector<int32_t>& t) { return XXH3_64bits(t.data(), t.size() * sizeof(int32_t)); }

// ---- the base: parsing and views ----

KldBase KldBase::open(const std::string& path) {
  KldBase b;
  b.name_ = path;
  b.map_ = MappedFile::open(path);
  const uint8_t* p = b.map_->data();
  const uint64_t size = b.map_->size();
  if (size >= 8 && std::memcmp(p, kMagic, 7) == 0 && p[7] == '1')
    fail(path, "was saved by an older bonsai (top-k layout, version 1): save it again with --save-logits");
  if (size < kHead || std::memcmp(p, kMagic, sizeof kMagic) != 0)
    fail(path, "not a bonsai logits file (made by bonsai perplexity --save-logits)");
  int64_t v[6];
  std::memcpy(v, p + sizeof kMagic, sizeof v);
  KldHeader& h = b.h_;
  h.n_vocab = v[0], h.n_ctx = v[1], h.chunks = v[2], h.kl_chunks = v[3], h.k = v[4];
  const int64_t n = v[5];
  std::memcpy(&h.tokens_hash, p + sizeof kMagic + sizeof v, 8);
  if (h.n_vocab <= 0 || h.k < 0 || h.k > h.n_vocab || n < 0 || h.n_ctx <= 0 || h.chunks < 0 || h.kl_chunks < 0 ||
      h.kl_chunks > h.chunks)
    fail(path, "header holds impossible sizes (vocabulary ", h.n_vocab, ", k ", h.k, ", positions ", n, ", chunks ",
         h.kl_chunks, " of ", h.chunks, ")");
  const int64_t per_chunk = scored_per_chunk(h.n_ctx), all = h.chunks * per_chunk;
  if (n != h.kl_chunks * per_chunk)
    fail(path, "holds ", n, " positions; ", h.kl_chunks, " chunks of --ctx ", h.n_ctx, " score ", h.kl_chunks * per_chunk);
  const uint64_t per = kld_record_bytes(h.n_vocab, h.k);
  if (uint64_t(n) > (size - kHead) / per || kld_file_bytes(h.n_vocab, h.k, n, all) != size)
    fail(path, "is ", size, " bytes; its header promises ", n, " distributions of ", per, " bytes and ", all,
         " log-probabilities (", kld_file_bytes(h.n_vocab, h.k, n, all), " bytes)");
  b.records_ = p + kHead, b.per_ = per, b.n_ = n;
  b.nll_ = b.records_ + uint64_t(n) * per, b.n_all_ = all;
  for (int64_t i = 0; i < n; ++i) {
    const BaseView d = b.at(i);
    if (d.next < 0 || d.next >= h.n_vocab) fail(path, "token id ", d.next, " is outside the vocabulary (", h.n_vocab, ")");
    for (int64_t j = 0; j < d.k; ++j)
      if (d.ids[j] < 0 || d.ids[j] >= h.n_vocab)
        fail(path, "token id ", d.ids[j], " is outside the vocabulary (", h.n_vocab, ")");
    if (d.k == 0 && !(std::isfinite(d.lmax) && std::isfinite(d.step) && d.step > 0))
      fail(path, "position ", i, " holds an impossible scale (", d.lmax, ", ", d.step, ")");
  }
  return b;
}

BaseView KldBase::at(int64_t i) const {
  const uint8_t* r = records_ + uint64_t(i) * per_;
  BaseView d;
  float a = 0, b = 0;
  std::memcpy(&d.next, r, 4);
  std::memcpy(&d.logp_next, r + 4, 4);
  std::memcpy(&a, r + 8, 4);
  std::memcpy(&b, r + 12, 4);
  d.k = h_.k;
  // Records start 8-aligned in a page-aligned map (or a vector's storage) and are multiples of 4.
  if (d.k == 0) {
    d.code = reinterpret_cast<const uint16_t*>(r + kRecordHead);
    d.lmax = a, d.step = b;
  } else {
    d.ids = reinterpret_cast<const int32_t*>(r + kRecordHead);
    d.logp = reinterpret_cast<const float*>(r + kRecordHead + d.k * 4);
    d.logp_rest = a;
  }
  return d;
}

float KldBase::logp_next(int64_t i) const {
  float v = 0;
  std::memcpy(&v, nll_ + uint64_t(i) * 4, 4);
  return v;
}

double KldBase::mean_rest_mass() const {
  if (h_.k == 0 || n_ == 0) return 0;
  double rest = 0;
  for (int64_t i = 0; i < n_; ++i) {
    const float lr = at(i).logp_rest;
    rest += std::isfinite(lr) ? std::exp(double(lr)) : 0.0;
  }
  return rest / double(n_);
}

void KldBase::check_fits(const KldHeader& kh) const {
  if (h_.n_vocab != kh.n_vocab) fail(name_, "was saved with a vocabulary of ", h_.n_vocab, "; this model has ", kh.n_vocab);
  if (h_.n_ctx != kh.n_ctx) fail(name_, "was saved with --ctx ", h_.n_ctx, "; this run uses ", kh.n_ctx);
  if (h_.tokens_hash != kh.tokens_hash) fail(name_, "was saved on another text (or another tokenization of it)");
}

// ---- recording ----

struct KldRecorder::Sink {
  std::unique_ptr<AtomicFile> file;
  std::vector<uint8_t> memory;
  void write(const uint8_t* p, uint64_t n) {
    if (file) file->write(p, n);
    else memory.insert(memory.end(), p, p + n);
  }
};

KldRecorder::KldRecorder(const KldHeader& h, const std::string& path) : h_(h), path_(path), sink_(new Sink) {
  if (h.k < 0 || h.k > h.n_vocab) throw Error(cat("--kl-top-k ", h.k, " must be 0 (every token) or 1..", h.n_vocab));
  if (!path.empty()) sink_->file = std::make_unique<AtomicFile>(path);
  uint8_t head[kHead];
  write_header(head, h_, 0);
  sink_->write(head, kHead);
}

KldRecorder::~KldRecorder() = default;

void KldRecorder::add(const float* logits, double log_z, int32_t next, bool with_dist) {
  add_rows(logits, &log_z, &next, 1, with_dist ? 1 : 0);
}

void KldRecorder::add_rows(const float* logits, const double* log_z, const int32_t* next, int64_t n, int64_t with_dist) {
  with_dist = std::clamp<int64_t>(with_dist, 0, n);
  std::vector<std::vector<uint8_t>> recs(static_cast<size_t>(with_dist));
  cpu::parallel_for(with_dist, with_dist > 1, [&](int64_t i) {
    encode(logits + i * h_.n_vocab, log_z[i], h_.n_vocab, h_.k, next[i], recs[size_t(i)]);
  });
  for (const auto& r : recs) sink_->write(r.data(), r.size());
  n_ += with_dist;
  for (int64_t i = 0; i < n; ++i) logp_next_.push_back(float(double(logits[i * h_.n_vocab + next[i]]) - log_z[i]));
}

KldBase KldRecorder::finish(int64_t chunks, int64_t kl_chunks) {
  h_.chunks = chunks, h_.kl_chunks = kl_chunks;
  uint8_t head[kHead];
  write_header(head, h_, n_);
  sink_->write(reinterpret_cast<const uint8_t*>(logp_next_.data()), logp_next_.size() * 4);
  if (sink_->file) {
    sink_->file->write_at(0, head, kHead);
    sink_->file->commit();
    sink_.reset();
    return KldBase::open(path_);
  }
  KldBase b;
  b.own_ = std::move(sink_->memory);
  std::memcpy(b.own_.data(), head, kHead);
  b.h_ = h_, b.name_ = "the base run", b.records_ = b.own_.data() + kHead, b.per_ = kld_record_bytes(h_.n_vocab, h_.k);
  b.n_ = n_;
  b.nll_ = b.records_ + uint64_t(n_) * b.per_, b.n_all_ = int64_t(logp_next_.size());
  return b;
}

// ---- comparing ----

KldAccumulator::Row KldAccumulator::measure(const BaseView& base, const float* logits, double log_z, int64_t n_vocab) {
  auto logq = [&](int32_t v) { return double(logits[v]) - log_z; };
  Row r;
  int32_t base_arg = 0;
  if (base.k == 0) {
    thread_local std::vector<float> work;
    work.resize(size_t(n_vocab));
    double abs = 0;
    cpu::kl_codes(base.code, n_vocab, base.lmax, base.step, logits, log_z, work.data(), &r.kld, &abs);
    const double delta = double(base.step) / 2, eps = std::expm1(2 * delta);
    r.bound = eps * std::exp(2 * delta) * (abs + 2 * delta) + eps * eps;
    for (int64_t v = 1; v < n_vocab; ++v)
      if (base.code[v] < base.code[base_arg]) base_arg = int32_t(v);
  } else {
    // This side is reduced exactly as the base was (log-probabilities rounded to float, the rest's
    // mass from the unrounded sum), so a model against its own saved logits gives exactly 0.
    double kept_q = 0;
    for (int64_t i = 0; i < base.k; ++i) {
      const double lq_exact = logq(base.ids[i]), lp = base.logp[i], lq = double(float(lq_exact));
      r.kld += std::exp(lp) * (lp - lq);
      kept_q += std::exp(lq_exact);
    }
    r.rest = std::isfinite(base.logp_rest) ? std::exp(double(base.logp_rest)) : 0.0;
    if (r.rest > 0) {
      const double q_rest = std::max(1.0 - kept_q, 1e-300);
      r.kld += r.rest * (double(base.logp_rest) - double(float(std::log(q_rest))));
    }
    base_arg = base.ids[0];
  }
  r.kld = std::max(r.kld, 0.0);  // rounding can leave -1e-12 for identical models
  int32_t arg = 0;
  for (int64_t v = 1; v < n_vocab; ++v)
    if (logits[v] > logits[arg]) arg = int32_t(v);
  r.agree = arg == base_arg;
  r.dp = std::exp(double(float(logq(base.next)))) - std::exp(double(base.logp_next));
  return r;
}

void KldAccumulator::push(const Row& r) {
  kld_.push_back(r.kld);
  dp_.push_back(r.dp);
  agree_ += r.agree;
  rest_ += r.rest;
  bound_ += r.bound;
}

void KldAccumulator::add(const BaseView& base, const float* logits, double log_z, int64_t n_vocab) {
  push(measure(base, logits, log_z, n_vocab));
}

void KldAccumulator::add_rows(const KldBase& base, int64_t at, const float* logits, const double* log_z,
                              const int32_t* next, int64_t n, int64_t n_vocab) {
  const int64_t with_dist = std::clamp<int64_t>(base.positions() - at, 0, n);
  std::vector<Row> rows(static_cast<size_t>(with_dist));
  // Rows measured on every thread, added in order: the same sums as one row at a time.
  cpu::parallel_for(with_dist, with_dist > 1, [&](int64_t i) {
    rows[size_t(i)] = measure(base.at(at + i), logits + i * n_vocab, log_z[i], n_vocab);
  });
  for (const Row& r : rows) push(r);
  for (int64_t i = 0; i < n && at + i < base.all_positions(); ++i)
    add_pair(base.logp_next(at + i), double(float(double(logits[i * n_vocab + next[i]]) - log_z[i])));
}

void KldAccumulator::add_pair(double lp, double lq) {
  ++paired_;
  sp_ -= lp, sq_ -= lq;
  spp_ += lp * lp, sqq_ += lq * lq, spq_ += lp * lq;
}

namespace {

// The paired difference of the two perplexities (KldResult's comment), from the nll sums.
void paired_difference(double n, double sp, double sq, double spp, double sqq, double spq, KldResult& r) {
  const double mp = sp / n, mq = sq / n;
  const double vp = std::max(spp / n - mp * mp, 0.0), vq = std::max(sqq / n - mq * mq, 0.0);
  const double cov = spq / n - mp * mq;
  const double f = n > 1 ? 1.0 / (n - 1) : 0.0;  // variance of a mean over n positions
  r.ppl_base = std::exp(mp), r.ppl = std::exp(mq);
  r.dlnppl = mq - mp;
  r.dlnppl_err = std::sqrt(std::max(vp + vq - 2 * cov, 0.0) * f);
  r.dppl = r.ppl - r.ppl_base;
  // PPL = exp(mean nll), so d PPL = PPL d(mean): the delta method with the covariance of the means.
  const double a = r.ppl, b = r.ppl_base;
  r.dppl_err = std::sqrt(std::max(a * a * vq + b * b * vp - 2 * a * b * cov, 0.0) * f);
  r.dppl_err_unpaired = std::sqrt((a * a * vq + b * b * vp) * f);
  r.nll_correlation = vp > 0 && vq > 0 ? cov / std::sqrt(vp * vq) : 1.0;
}

}  // namespace

KldResult KldAccumulator::result() const {
  KldResult r;
  r.n = int64_t(kld_.size());
  if (paired_ > 0) paired_difference(double(paired_), sp_, sq_, spp_, sqq_, spq_, r);
  r.paired_n = paired_;
  if (r.n == 0) return r;
  const double n = double(r.n);
  double s = 0, s2 = 0, d = 0, d2 = 0;
  for (double x : kld_) s += x, s2 += x * x;
  for (double x : dp_) d += x, d2 += x * x;
  r.mean = s / n;
  r.mean_err = r.n > 1 ? std::sqrt(std::max(s2 / n - r.mean * r.mean, 0.0) / (n - 1)) : 0.0;
  std::vector<double> sorted = kld_;
  std::sort(sorted.begin(), sorted.end());
  auto quantile = [&](double q) { return sorted[size_t(std::min(n - 1, std::floor(q * (n - 1) + 0.5)))]; };
  r.median = quantile(0.5);
  r.p90 = quantile(0.9);
  r.p99 = quantile(0.99);
  r.p999 = quantile(0.999);
  r.max = sorted.back();
  r.top1_agree = double(agree_) / n;
  r.dp_mean = d / n;
  r.dp_rms = std::sqrt(d2 / n);
  r.mean_rest = rest_ / n;
  r.rounding_bound = bound_ / n;
  return r;
}

KldRun perplexity_kld(const Model& model, Backend& backend, const std::vector<int32_t>& tokens,
                      const PerplexityOptions& po_in, const std::string& source, KldRecorder* save,
                      int64_t save_chunks, const KldBase* base,
                      const std::function<void(int64_t, double)>& on_chunk) {
  KldRun run;
  PerplexityOptions po = po_in;
  KldAccumulator acc;
  const int64_t n_vocab = model.cfg.n_vocab;
  const int64_t per_chunk = scored_per_chunk(po.n_ctx);
  const int64_t save_n = save_chunks < 0 ? std::numeric_limits<int64_t>::max() : save_chunks * per_chunk;
  int64_t at = 0;  // the callback runs inside perplexity() below: it must outlive the if
  if (save || base) {
    po.on_rows = [&](const float* logits, const double* log_z, const int32_t* next, int64_t n) {
      if (save) save->add_rows(logits, log_z, next, n, std::clamp<int64_t>(save_n - at, 0, n));
      if (base) acc.add_rows(*base, at, logits, log_z, next, n, n_vocab);
      at += n;
    };
  }
  run.ppl = perplexity(model, backend, tokens, po, source, on_chunk);
  if (base) {
    if (at < base->all_positions())
      fail(base->name(), "holds ", base->all_positions(), " positions; this run scored ", at);
    run.kld = acc.result();
  }
  return run;
}

}  // namespace bonsai
