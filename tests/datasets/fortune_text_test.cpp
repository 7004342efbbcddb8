// fortune(6) files -> one item per poem or saying (docs/corpus.md, "fortunes-zh").
#include "datasets/fortune_text.h"

#include <gtest/gtest.h>

#include "datasets/paragraph_text.h"

namespace bonsai::datasets {
namespace {

TEST(FortuneText, PoemsBecomeOneLineEach) {
  const std::string file =
      "\x1b[32m《感遇・其一》\x1b[m\n"
      "\x1b[33m作者：张九龄\x1b[m\n"
      "兰叶春葳蕤，桂华秋皎洁。\n"
      "欣欣此生意，自尔为佳节。\n"
      "%\n"
      "  要知道  \n"
      "\n"
      "the end\n"
      "%\n"
      "%\n"
      "最后一条，没有分隔符";
  const auto items = fortune_items(file);
  ASSERT_EQ(items.size(), 3u);
  // Title and author lines do not end in sentence punctuation: a space follows them, which
  // clean_paragraph() removes between CJK text. Verses end in "。": joined directly.
  EXPECT_EQ(items[0], "《感遇・其一》 作者：张九龄 兰叶春葳蕤，桂华秋皎洁。欣欣此生意，自尔为佳节。");
  EXPECT_EQ(clean_paragraph(items[0]), "《感遇・其一》作者：张九龄兰叶春葳蕤，桂华秋皎洁。欣欣此生意，自尔为佳节。");
  EXPECT_EQ(clean_paragraph(items[1]), "要知道 the end");
  EXPECT_EQ(items[2], "最后一条，没有分隔符 ");
}

TEST(FortuneText, OnlyColourSequencesAreRemoved) {
  // ESC [ ... m is a colour; an ESC that starts anything else stays (and is not text a filter keeps).
  EXPECT_EQ(fortune_items("\x1b[1;31m红\x1b[0m字\n"), std::vector<std::string>{"红字 "});
  EXPECT_EQ(fortune_items("\x1b[2J清屏\n"), std::vector<std::string>{"\x1b[2J清屏 "});
  EXPECT_TRUE(fortune_items("%\n%\n\n").empty());
  EXPECT_TRUE(fortune_items("").empty());
}

}  // namespace
}  // namespace bonsai::datasets
