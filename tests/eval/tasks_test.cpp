// Task scoring (eval/tasks.h) on stories260K: the parsers read llama-perplexity's formats; on
// hand-made multiple-choice tasks whose answer is known (a fluent continuation against letter
// salad, in every position) the scorer picks it; and each scorer's figure for a choice equals
// the mean log-probability computed directly from a full forward of its sequence.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/tasks.h"
#include "formats/error.h"
#include "runtime/cpu/ops.h"
#include "runtime/load.h"
#include "runtime/transformer.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::eval;

namespace {

const char* kStory = "Once upon a time, there was a little girl named Lily. She liked to play outside with her";

}  // namespace

TEST(Tasks, ParsersReadLlamaPerplexityFormats) {
  const auto hs = parse_hellaswag("ctx one\n2\ne0\ne1\ne2\ne3\nctx two\n0\nf0\nf1\nf2\nf3\n", "h.txt");
  ASSERT_EQ(hs.size(), 2u);
  EXPECT_EQ(hs[0].question, "ctx one");
  EXPECT_EQ(hs[0].correct, 2);
  EXPECT_EQ(hs[1].answers[3], "f3");
  EXPECT_NE(test::error_of([] { parse_hellaswag("a\n1\nb\nc\n", "h.txt"); }).find("h.txt"), std::string::npos);
  EXPECT_NE(test::error_of([] { parse_hellaswag("a\n9\nb\nc\nd\ne\n", "h.txt"); }).find("line 2"), std::string::npos);
  int64_t skipped = 0;
  const auto wg = parse_winogrande(
      "index,sentence,option1,option2,answer\n0,\"Sarah was a much better surgeon than Maria so _ always got the harder cases.\",Sarah,Maria,1\n"
      "1,The trophy doesn't fit into the suitcase because _ is too small.,trophy,suitcase,2",
      "w.csv", &skipped);
  EXPECT_EQ(skipped, 1);
  ASSERT_EQ(wg.size(), 2u);
  EXPECT_EQ(wg[0].first, "Sarah was a much better surgeon than Maria so ");
  EXPECT_EQ(wg[0].second, " always got the harder cases.");
  EXPECT_EQ(wg[0].answer, 0);
  EXPECT_EQ(wg[1].choices[1], "suitcase");
  EXPECT_EQ(wg[1].answer, 1);
  EXPECT_NE(test::error_of([] { parse_winogrande("0,no blank here,a,b,1\n", "w.csv"); }).find("'_'"), std::string::npos);
}

TEST(Tasks, KnownAnswersAreFoundAndScoresAreTheDirectMeanLogProbability) {
  BONSAI_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const auto model = load_model(test::shared_file("models/stories260K/stories260K.gguf").string());
  const auto tok = model_tokenizer(*model);
  auto backend = make_backend("cpu", 1);
  std::vector<ChoiceTask> tasks;
  for (int right = 0; right < 4; ++right) {
    ChoiceTask t;
    t.question = kStory;
    for (int a = 0; a < 4; ++a) t.answers.push_back(a == right ? "friends in the park." : "zq xv kk qpz wwj.");
    t.answers[size_t((right + 1) % 4)] = "qq zzkx vvj xq.";
    t.correct = right;
    tasks.push_back(t);
  }
  const TaskScore r = score_choices(*model, *backend, *tok, tasks);
  EXPECT_EQ(r.tasks, 4);
  EXPECT_EQ(r.correct, 4);
  EXPECT_DOUBLE_EQ(r.chance, 0.25);

  // One choice's score, directly: a fresh forward of the whole sequence, mean log p over the
  // tokens after the common prefix.
  const auto a = tok->encode(std::string(kStory) + " friends in the park.", tok->add_bos_default(), false);
  const auto b = tok->encode(std::string(kStory) + " zq xv kk qpz wwj.", tok->add_bos_default(), false);
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  Session s(*model, *backend, int64_t(a.size()), int64_t(a.size()));
  const int64_t nv = model->cfg.n_vocab;
  std::vector<float> logits(a.size() * size_t(nv));
  s.eval(a.data(), int64_t(a.size()), 0, logits.data());
  double direct = 0;
  for (size_t j = common; j < a.size(); ++j) {
    float mx = 0;
    double lse = 0;
    cpu::logsumexp(logits.data() + (j - 1) * size_t(nv), nv, &mx, &lse);
    direct += double(logits[(j - 1) * size_t(nv) + size_t(a[j])]) - mx - lse;
  }
  direct /= double(a.size() - common);
  // The scorer evaluates the shared prefix once and each answer from there: the same figure.
  EXPECT_NEAR(r.scores[0][0], direct, 1e-4);
  EXPECT_EQ(r.chosen, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_GT(direct, -3.0);  // a fluent continuation: far likelier than chance (ln(1/512) = -6.2)
  // Two answers of the same text leave nothing to tell them apart: a named error, not a coin toss.
  std::vector<ChoiceTask> same = {{kStory, {"friends in the park.", "friends in the park."}, 0}};
  EXPECT_NE(test::error_of([&] { score_choices(*model, *backend, *tok, same); }).find("task 0"), std::string::npos);

  // Winogrande: the scorer's two figures against each sentence's own full forward, scored over
  // the tokens after the choice, the last excluded (llama-perplexity's rule; both sentences leave
  // more than 3 tokens after the choice).
  WinograndeTask wt = {"Once upon a time, there was a little girl named Lily. ", " liked to play outside with her friends.",
                       {"She", "The dog"}, 0};
  const TaskScore w = score_winogrande(*model, *backend, *tok, {wt});
  ASSERT_EQ(w.scores.size(), 1u);
  for (int k = 0; k < 2; ++k) {
    const auto seq = tok->encode(wt.first + wt.choices[k] + wt.second, tok->add_bos_default(), false);
    const size_t base = tok->encode(wt.first + wt.choices[k], tok->add_bos_default(), false).size();
    Session full(*model, *backend, int64_t(seq.size()), int64_t(seq.size()));
    std::vector<float> l(seq.size() * size_t(nv));
    full.eval(seq.data(), int64_t(seq.size()), 0, l.data());
    double sum = 0;
    for (size_t j = base; j + 1 < seq.size(); ++j) {
      float mx = 0;
      double lse = 0;
      cpu::logsumexp(l.data() + (j - 1) * size_t(nv), nv, &mx, &lse);
      sum += double(l[(j - 1) * size_t(nv) + size_t(seq[j])]) - mx - lse;
    }
    EXPECT_NEAR(w.scores[0][size_t(k)], sum / double(seq.size() - base - 1), 1e-4) << k;
  }
  EXPECT_EQ(w.chosen[0], w.scores[0][0] > w.scores[0][1] ? 0 : 1);
}
