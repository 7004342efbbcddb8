#include "datasets/choice_tasks.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "datasets/overlap.h"
#include "formats/error.h"

namespace bonsai::datasets {

namespace {

int64_t chars(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// A paragraph's sentences, each with its terminator (。！？ or ; the last may have none).
std::vector<std::string> sentences(const std::string& p) {
  static const char* const kEnds[] = {"\xE3\x80\x82", "\xEF\xBC\x81", "\xEF\xBC\x9F"};  // 。！？
  std::vector<std::string> out;
  size_t from = 0;
  for (size_t i = 0; i + 3 <= p.size(); ++i)
    for (const char* e : kEnds)
      if (std::memcmp(p.data() + i, e, 3) == 0) {
        out.push_back(p.substr(from, i + 3 - from));
        from = i + 3;
        i += 2;
        break;
      }
  if (from < p.size()) out.push_back(p.substr(from));
  return out;
}

struct Sentence {
  size_t paragraph;
  std::string text;
};

}  // namespace

ChoiceSet build_choice_tasks(const std::string& eval_text, const std::vector<std::string>& calib_files,
                             const ChoiceOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string& c : calib_files)
    if (fs::equivalent(c, eval_text, ec)) fail(eval_text, "is calibration text (given as --calib): tasks are built from held-out text only");
  if (o.tasks < 1 || o.choices < 2) fail(eval_text, "needs at least one task and two choices");
  ChoiceSet set;
  const std::vector<std::string> paras = read_lines(eval_text);
  set.paragraphs = paras.size();
  // Calibration windows indexed once; a paragraph sharing one is left out entirely.
  OverlapIndex calib;
  for (const std::string& f : calib_files)
    for (const std::string& l : read_lines(f)) calib.add(l);
  std::vector<bool> clean(paras.size());
  for (size_t i = 0; i < paras.size(); ++i) {
    clean[i] = !paras[i].empty() && !calib.find(paras[i]);
    set.overlapping += !paras[i].empty() && !clean[i];
  }
  // Candidates: (paragraph, sentence i >= 1) with a passage of whole sentences before it.
  std::vector<std::vector<std::string>> sents(paras.size());
  std::vector<Sentence> pool;
  struct Cand {
    size_t p, i;
  };
  std::vector<Cand> cands;
  for (size_t p = 0; p < paras.size(); ++p) {
    if (!clean[p]) continue;
    sents[p] = sentences(paras[p]);
    for (size_t i = 0; i < sents[p].size(); ++i) {
      const int64_t n = chars(sents[p][i]);
      if (n < o.answer_min || n > o.answer_max) continue;
      pool.push_back({p, sents[p][i]});
      if (i > 0 && chars(sents[p][i - 1]) <= o.context_max) cands.push_back({p, i});
    }
  }
  set.candidates = cands.size();
  std::mt19937_64 rng(o.seed);
  for (size_t k = cands.size(); k > 1; --k) std::swap(cands[k - 1], cands[rng() % k]);  // Fisher-Yates
  std::set<size_t> used;  // one task per paragraph
  for (const Cand& c : cands) {
    if (int64_t(set.tasks.size()) == o.tasks) break;
    if (used.count(c.p)) continue;
    ChoiceTask t;
    // The passage: the sentences just before the answer, as many as fit in context_max.
    for (size_t j = c.i; j-- > 0;) {
      if (chars(sents[c.p][j]) + chars(t.question) > o.context_max) break;
      t.question = sents[c.p][j] + t.question;
    }
    if (chars(t.question) < o.context_min) continue;
    const std::string& truth = sents[c.p][c.i];
    const int64_t len = chars(truth);
    std::vector<std::string> wrong;
    for (int tries = 0; int(wrong.size()) < o.choices - 1 && tries < 1000; ++tries) {
      const Sentence& s = pool[rng() % pool.size()];
      const int64_t n = chars(s.text);
      if (s.paragraph == c.p || n * 2 < len || n > 2 * len || s.text == truth ||
          std::find(wrong.begin(), wrong.end(), s.text) != wrong.end())
        continue;
      wrong.push_back(s.text);
    }
    if (int(wrong.size()) < o.choices - 1) continue;
    t.correct = int(rng() % uint64_t(o.choices));
    for (int a = 0, w = 0; a < o.choices; ++a) t.answers.push_back(a == t.correct ? truth : wrong[size_t(w++)]);
    used.insert(c.p);
    set.tasks.push_back(std::move(t));
  }
  if (int64_t(set.tasks.size()) < o.tasks)
    fail(eval_text, "yields ", set.tasks.size(), " tasks under these rules (", set.candidates, " candidate sentences in ",
         set.paragraphs - set.overlapping, " paragraphs clear of calibration text); asked for ", o.tasks);
  return set;
}

namespace {

void put_u32(std::string& o, uint32_t v) { o.append(reinterpret_cast<const char*>(&v), 4); }
void put_str(std::string& o, const std::string& s) {
  put_u32(o, uint32_t(s.size()));
  o += s;
}

}  // namespace

std::string serialize_choice_tasks(const std::vector<ChoiceTask>& tasks) {
  std::vector<std::string> body;
  for (const ChoiceTask& t : tasks) {
    std::string b;
    put_str(b, t.question);
    put_u32(b, uint32_t(t.answers.size()));
    for (const std::string& a : t.answers) put_str(b, a);
    for (size_t a = 0; a < t.answers.size(); ++a) put_u32(b, int(a) == t.correct ? 1u : 0u);
    put_u32(b, 0);  // no multiple-answer set
    body.push_back(std::move(b));
  }
  std::string out;
  put_u32(out, uint32_t(tasks.size()));
  uint32_t at = uint32_t(4 + 4 * tasks.size());
  for (const std::string& b : body) {
    put_u32(out, at);
    at += uint32_t(b.size());
  }
  for (const std::string& b : body) out += b;
  return out;
}

std::vector<ChoiceTask> parse_choice_tasks(const std::string& bytes, const std::string& source) {
  size_t at = 0;
  auto u32 = [&](const char* what) {
    if (bytes.size() - at < 4) fail(source, "ends inside ", what, " at byte ", at);
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + at, 4);
    at += 4;
    return v;
  };
  auto str = [&](const char* what) {
    const uint32_t n = u32(what);
    if (bytes.size() - at < n) fail(source, what, " of ", n, " bytes at byte ", at - 4, " runs past the end");
    std::string s = bytes.substr(at, n);
    at += n;
    return s;
  };
  const uint32_t n = u32("the task count");
  if (uint64_t(n) * 4 > bytes.size()) fail(source, "claims ", n, " tasks; not a --multiple-choice file");
  std::vector<uint32_t> pos(n);
  for (auto& p : pos) p = u32("the offset table");
  std::vector<ChoiceTask> out;
  for (uint32_t i = 0; i < n; ++i) {
    if (pos[i] != at) fail(source, "task ", i, " is at byte ", at, ", its offset says ", pos[i]);
    ChoiceTask t;
    t.question = str("a question");
    for (int set = 0; set < 2; ++set) {
      const uint32_t k = u32("an answer count");
      if (k > 100) fail(source, "task ", i, " has ", k, " answers (at most 100)");
      std::vector<std::string> answers;
      for (uint32_t a = 0; a < k; ++a) answers.push_back(str("an answer"));
      int ones = 0;
      for (uint32_t a = 0; a < k; ++a) {
        const uint32_t label = u32("a label");
        if (set == 0 && label == 1) t.correct = int(a), ++ones;
      }
      if (set == 0) {
        if (k < 2 || ones != 1) fail(source, "task ", i, " has ", k, " answers with ", ones, " labelled right (need >= 2, one)");
        t.answers = std::move(answers);
      }
    }
    if (t.question.empty()) fail(source, "task ", i, " has an empty question");
    out.push_back(std::move(t));
  }
  if (at != bytes.size()) fail(source, "has ", bytes.size() - at, " bytes after its last task");
  return out;
}

}  // namespace bonsai::datasets
