#include "eval/tasks.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <sstream>

#include "formats/error.h"
#include "runtime/cpu/ops.h"
#include "runtime/transformer.h"

namespace bonsai::eval {

std::vector<ChoiceTask> parse_hellaswag(const std::string& text, const std::string& source) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  if (lines.empty() || lines.size() % 6) fail(source, "has ", lines.size(), " lines; HellaSwag files have 6 a task");
  std::vector<ChoiceTask> out;
  for (size_t i = 0; i < lines.size(); i += 6) {
    ChoiceTask t;
    t.question = lines[i];
    const std::string& g = lines[i + 1];
    if (g.size() != 1 || g[0] < '0' || g[0] > '3') fail(source, "line ", i + 2, ": the right ending's index must be 0..3, not '", g, "'");
    t.correct = g[0] - '0';
    t.answers.assign(lines.begin() + long(i) + 2, lines.begin() + long(i) + 6);
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<WinograndeTask> parse_winogrande(const std::string& text, const std::string& source, int64_t* skipped) {
  std::vector<WinograndeTask> out;
  std::stringstream in(text);
  int64_t line_no = 0, skip = 0;
  for (std::string l; std::getline(in, l);) {
    ++line_no;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (l.empty()) continue;
    // The first four commas outside double quotes end index, sentence, option1, option2.
    std::vector<size_t> comma;
    bool quoted = false;
    for (size_t i = 0; i < l.size() && comma.size() < 4; ++i) {
      if (l[i] == '"') quoted = !quoted;
      else if (l[i] == ',' && !quoted) comma.push_back(i);
    }
    const std::string answer = comma.size() == 4 ? l.substr(comma[3] + 1) : "";
    if (comma.size() < 4 || (answer != "1" && answer != "2")) {
      if (out.empty() && skip == 0) {  // a header line
        ++skip;
        continue;
      }
      fail(source, "line ", line_no, ": not index,sentence,option1,option2,answer (answer 1 or 2)");
    }
    std::string sentence = l.substr(comma[0] + 1, comma[1] - comma[0] - 1);
    if (sentence.size() >= 2 && sentence.front() == '"' && sentence.back() == '"') sentence = sentence.substr(1, sentence.size() - 2);
    const size_t u = sentence.find('_');
    if (u == std::string::npos) fail(source, "line ", line_no, ": the sentence has no '_' to fill");
    WinograndeTask t;
    t.first = sentence.substr(0, u);
    t.second = sentence.substr(u + 1);
    t.choices[0] = l.substr(comma[1] + 1, comma[2] - comma[1] - 1);
    t.choices[1] = l.substr(comma[2] + 1, comma[3] - comma[2] - 1);
    t.answer = answer == "1" ? 0 : 1;
    out.push_back(std::move(t));
  }
  if (out.empty()) fail(source, "holds no Winogrande task");
  if (skipped) *skipped = skip;
  return out;
}

namespace {

// Evaluates seqs that share their first `common` tokens: the prefix once, then each sequence's
// rest from there (Session::rewind). lp[s][j - common] = log p(seqs[s][j] | seqs[s][< j]) for j
// in [common, size).
std::vector<std::vector<double>> continuation_logprobs(Session& sess, int64_t n_vocab,
                                                       const std::vector<std::vector<int32_t>>& seqs, int64_t common) {
  std::vector<float> last(static_cast<size_t>(n_vocab)), rows;
  auto logp = [&](const float* l, int32_t tok) {
    float mx = 0;
    double lse = 0;
    cpu::logsumexp(l, n_vocab, &mx, &lse);
    return double(l[tok]) - double(mx) - lse;
  };
  sess.reset();
  sess.eval(seqs[0].data(), common, common - 1, last.data());
  std::vector<std::vector<double>> out;
  for (const auto& s : seqs) {
    const int64_t rest = int64_t(s.size()) - common;
    sess.rewind(common);
    rows.resize(size_t(rest * n_vocab));
    sess.eval(s.data() + common, rest, 0, rows.data());
    std::vector<double> lp;
    lp.push_back(logp(last.data(), s[size_t(common)]));
    for (int64_t j = 1; j < rest; ++j) lp.push_back(logp(rows.data() + (j - 1) * n_vocab, s[size_t(common + j)]));
    out.push_back(std::move(lp));
  }
  return out;
}

int64_t common_prefix(const std::vector<std::vector<int32_t>>& seqs) {
  size_t n = seqs[0].size();
  for (const auto& s : seqs) n = std::min(n, s.size());
  for (size_t i = 0; i < n; ++i)
    for (const auto& s : seqs)
      if (s[i] != seqs[0][i]) return int64_t(i);
  return int64_t(n);
}

void finish(TaskScore& r, double chance_sum, std::chrono::steady_clock::time_point t0) {
  const double n = double(r.tasks);
  r.accuracy = r.tasks ? double(r.correct) / n : 0;
  r.accuracy_err = r.tasks > 1 ? std::sqrt(r.accuracy * (1 - r.accuracy) / (n - 1)) : 0;
  r.chance = r.tasks ? chance_sum / n : 0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t longest_or_shortest(const std::vector<std::vector<int32_t>>& seqs, bool longest) {
  size_t n = seqs[0].size();
  for (const auto& s : seqs) n = longest ? std::max(n, s.size()) : std::min(n, s.size());
  return int64_t(n);
}
int64_t longest(const std::vector<std::vector<int32_t>>& seqs) { return longest_or_shortest(seqs, true); }

}  // namespace

TaskScore score_choices(const Model& model, Backend& backend, const Tokenizer& tok, const std::vector<ChoiceTask>& tasks,
                        const TaskProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<std::vector<int32_t>>> all;
  int64_t n_ctx = 0;
  for (const ChoiceTask& t : tasks) {
    std::vector<std::vector<int32_t>> seqs;
    for (const std::string& a : t.answers) seqs.push_back(tok.encode(t.question + " " + a, tok.add_bos_default(), false));
    n_ctx = std::max(n_ctx, longest(seqs));
    all.push_back(std::move(seqs));
  }
  Session sess(model, backend, n_ctx, n_ctx);
  TaskScore r;
  double chance = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto& seqs = all[i];
    const int64_t common = common_prefix(seqs), shortest = longest_or_shortest(seqs, false);
    if (common < 1 || common >= shortest)
      throw Error(cat("task ", i, ": an answer adds no token to what the answers share (", common, " shared tokens, the shortest sequence ",
                      shortest, "): two answers are the same text, or one extends another"));
    const auto lp = continuation_logprobs(sess, model.cfg.n_vocab, seqs, common);
    size_t best = 0;
    double best_score = -1e300;
    std::vector<double> scores;
    for (size_t a = 0; a < lp.size(); ++a) {
      double s = 0;
      for (double x : lp[a]) s += x;
      s /= double(lp[a].size());
      scores.push_back(s);
      if (s > best_score) best_score = s, best = a;
    }
    r.scores.push_back(std::move(scores));
    r.chosen.push_back(int(best));
    ++r.tasks;
    r.correct += int(best) == tasks[i].correct;
    chance += 1.0 / double(seqs.size());
    if (progress) progress(int64_t(i + 1), int64_t(tasks.size()));
  }
  finish(r, chance, t0);
  return r;
}

TaskScore score_winogrande(const Model& model, Backend& backend, const Tokenizer& tok,
                           const std::vector<WinograndeTask>& tasks, const TaskProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int64_t kMinTrailing = 3;  // llama-perplexity's k_min_trailing_ctx
  const bool bos = tok.add_bos_default();
  std::vector<std::vector<std::vector<int32_t>>> all;
  std::vector<std::array<int64_t, 2>> bases;
  int64_t n_ctx = 0;
  for (const WinograndeTask& t : tasks) {
    std::vector<std::vector<int32_t>> seqs;
    std::array<int64_t, 2> nb{};
    for (int k = 0; k < 2; ++k) {
      seqs.push_back(tok.encode(t.first + t.choices[k] + t.second, bos, false));
      nb[size_t(k)] = int64_t(tok.encode(t.first + t.choices[k], bos, false).size());
    }
    n_ctx = std::max(n_ctx, longest(seqs));
    all.push_back(std::move(seqs));
    bases.push_back(nb);
  }
  Session sess(model, backend, n_ctx, n_ctx);
  TaskScore r;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto& seqs = all[i];
    const int64_t common = common_prefix(seqs);
    if (common < 1 || common >= int64_t(std::min(seqs[0].size(), seqs[1].size())))
      throw Error(cat("task ", i, ": the two sentences do not differ after a shared start"));
    const auto lp = continuation_logprobs(sess, model.cfg.n_vocab, seqs, common);
    const bool skip_choice = int64_t(seqs[0].size()) - common > kMinTrailing && int64_t(seqs[1].size()) - common > kMinTrailing;
    double score[2];
    for (int k = 0; k < 2; ++k) {
      const int64_t size = int64_t(seqs[size_t(k)].size());
      const int64_t base = std::clamp(skip_choice ? bases[i][size_t(k)] : common, common, size - 1);
      const int64_t last = size - base > 1 ? 1 : 0;
      double s = 0;
      for (int64_t j = base; j < size - last; ++j) s += lp[size_t(k)][size_t(j - common)];
      score[k] = s / double(size - base - last);
    }
    const int choice = score[0] > score[1] ? 0 : 1;
    r.scores.push_back({score[0], score[1]});
    r.chosen.push_back(choice);
    ++r.tasks;
    r.correct += choice == tasks[i].answer;
    if (progress) progress(int64_t(i + 1), int64_t(tasks.size()));
  }
  finish(r, 0.5 * double(tasks.size()), t0);
  return r;
}

}  // namespace bonsai::eval
