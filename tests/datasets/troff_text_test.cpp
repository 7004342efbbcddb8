// man-page troff -> paragraphs (docs/corpus.md, "manpages-zh").
#include "datasets/troff_text.h"

#include <gtest/gtest.h>

#include "datasets/paragraph_text.h"

namespace bonsai::datasets {
namespace {

std::vector<std::string> cleaned(const std::vector<std::string>& raw) {
  std::vector<std::string> out;
  for (const auto& p : raw) out.push_back(clean_paragraph(p));
  return out;
}

TEST(TroffText, SectionsParagraphsAndWrappedLines) {
  const char* page =
      ".\\\" 注释行不是正文\n"
      ".TH LS 1 \"2020\" \"GNU\" \"用户命令\"\n"
      ".SH 名称\n"
      "ls \\- 列出目录内容\n"
      ".SH 描述\n"
      "列出 FILE 的信息，默认为当前\n"
      "目录。\n"
      ".PP\n"
      "第二段\n"
      "\n"
      "第三段。\n";
  EXPECT_EQ(
      cleaned(troff_paragraphs(page)),
      (std::vector<std::string>{"ls - 列出目录内容", "列出 FILE 的信息，默认为当前目录。", "第二段", "第三段。"}));
}

TEST(TroffText, FontMacrosKeepTheirTextAndTpTagsAreDropped) {
  const char* page =
      ".SH 选项\n"
      ".TP\n"
      ".B \\-a, \\-\\-all\n"
      "不隐藏以 . 开头的条目\n"
      ".TP\n"
      "\\fB\\-l\\fR\n"
      "使用长格式\n"
      ".PP\n"
      "参见\n"
      ".BR dir (1)\n"
      "和\n"
      ".B \"quoted words\" more\n"
      ".IP \\(bu 4\n"
      "列表项\n";
  EXPECT_EQ(troff_paragraphs(page), (std::vector<std::string>{"不隐藏以 . 开头的条目", "使用长格式",
                                                              "参见 dir(1) 和 quoted words more", "列表项"}));
}

TEST(TroffText, CodeTablesAndMacroDefinitionsAreDropped) {
  const char* page =
      ".de Xx \\\" a macro of the page\n"
      "定义体里的文字不是正文\n"
      "..\n"
      "开头\n"
      ".nf\n"
      "代码行一\n"
      ".fi\n"
      "中间\n"
      ".EX\n"
      "示例\n"
      ".EE\n"
      ".TS\n"
      "tab(:);\n"
      "表格:内容\n"
      ".TE\n"
      "表格之后的文字\n"
      ".ig\n"
      "被忽略\n"
      "..\n"
      "结尾\n";
  EXPECT_EQ(troff_paragraphs(page), (std::vector<std::string>{"开头", "中间", "表格之后的文字 结尾"}));
}

TEST(TroffText, EscapesAreResolved) {
  EXPECT_EQ(troff_paragraphs("\\fB粗体\\fP与\\fI斜体\\f(CW等宽\\f[R]\n"), std::vector<std::string>{"粗体与斜体等宽"});
  EXPECT_EQ(troff_paragraphs("a\\-b \\(em \\[rq] \\(co \\[u4E2D]\n"),
            std::vector<std::string>{"a-b \u2014 \u201d \u00a9 中"});
  EXPECT_EQ(troff_paragraphs("\\&.start \\e \\\\ x\\ y\\~z\n"), std::vector<std::string>{".start \\ \\ x y z"});
  // Colours, sizes, motions and registers print nothing (their names do not leak into the text).
  EXPECT_EQ(troff_paragraphs("\\m[blue]\\fB链接\\fR\\m[]\\&\\s-2\\u[1]\\d\\s+2。\n"),
            std::vector<std::string>{"链接[1]。"});
  EXPECT_EQ(troff_paragraphs("宽\\h'3m'度\\w'abc'\\n(.l\\*(Xx\\k1完\n"), std::vector<std::string>{"宽度完"});
  // The man(7) strings print their characters.
  EXPECT_EQ(troff_paragraphs("\\*(lq引用\\*(rq\n"), std::vector<std::string>{"\u201c引用\u201d"});
  // An inline comment ends the line; an unknown escape prints its character.
  EXPECT_EQ(troff_paragraphs("正文 \\\" 注释\n\\<邮件\\>\n"), std::vector<std::string>{"正文 <邮件>"});
}

TEST(TroffText, InterruptJoinsLinesWithoutASpace) {
  // \c continues the output line: "`s'" stays one word, and the next line's own blank stays.
  const char* page =
      "修饰符`\\c\n"
      ".B s\\c\n"
      "\\&', ar 可以\n";
  EXPECT_EQ(troff_paragraphs(page), std::vector<std::string>{"修饰符`s', ar 可以"});
}

TEST(TroffText, LoneDotsAndUnknownMacrosBreakWithoutText) {
  const char* page =
      "第一段\n"
      ".\n"
      "同一段\n"
      ".Xr foo 1\n"
      "第二段\n";
  EXPECT_EQ(troff_paragraphs(page), (std::vector<std::string>{"第一段 同一段", "第二段"}));
}

TEST(TroffText, SoStubsAreRecognized) {
  EXPECT_TRUE(troff_is_so_stub(".so man1/ls.1\n"));
  EXPECT_TRUE(troff_is_so_stub("\n  .so man3/printf.3\n"));
  EXPECT_FALSE(troff_is_so_stub(".TH X 1\n.so man1/ls.1\n"));
}

TEST(TroffText, BadInputNeverCrashes) {
  // Escapes cut off at the end of the line or page, unterminated quotes and blocks.
  for (const char* page : {"\\", "\\(", "\\[abc", "\\f", "\\s+", "\\h'unterminated", ".B \"open quote", ".nf\nno end",
                           ".de X\nno end", "\\\\\\", "\xFF\xFE\\\xE4"}) {
    EXPECT_NO_THROW(troff_paragraphs(page)) << page;
  }
  EXPECT_TRUE(troff_paragraphs(".nf\n从未结束的代码块").empty());
}

}  // namespace
}  // namespace bonsai::datasets
