// Paragraph clean-up and the CJK filters (docs/corpus.md, "Clean-up" and "Filters").
#include "datasets/paragraph_text.h"

#include <gtest/gtest.h>

namespace bonsai::datasets {
namespace {

TEST(ParagraphText, NfcComposesAndFoldsCompatibilityIdeographs) {
  // e + COMBINING ACUTE -> é; U+F900 (a CJK compatibility ideograph) -> U+8C48 (its canonical form).
  EXPECT_EQ(clean_paragraph("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(clean_paragraph("\uF900"), "\u8C48");
  // Already-NFC text is untouched.
  EXPECT_EQ(clean_paragraph("中文 text"), "中文 text");
}

TEST(ParagraphText, WhitespaceCollapsesAndEndsAreTrimmed) {
  EXPECT_EQ(clean_paragraph("  a \t\n b\u00a0\u00a0c  "), "a b c");
  // NBSP and the ideographic space are whitespace; ZERO WIDTH SPACE is dropped without a gap.
  EXPECT_EQ(clean_paragraph("a\u3000b"), "a b");
  EXPECT_EQ(clean_paragraph("ab\u200bcd"), "abcd");
  EXPECT_EQ(clean_paragraph("a \u200b b"), "a b");
  EXPECT_EQ(clean_paragraph(" \t\n"), "");
}

TEST(ParagraphText, SpacesBetweenCjkAreLineWrapArtefacts) {
  // Removed between two CJK characters (ideographs, CJK punctuation, full-width forms)...
  EXPECT_EQ(clean_paragraph("这是一个\n测试段落"), "这是一个测试段落");
  EXPECT_EQ(clean_paragraph("《感遇》 作者：张九龄 兰叶"), "《感遇》作者：张九龄兰叶");
  EXPECT_EQ(clean_paragraph("中 文 字"), "中文字");
  EXPECT_EQ(clean_paragraph("Ａ Ｂ"), "ＡＢ");  // full-width Latin
  // ...kept between CJK and anything else.
  EXPECT_EQ(clean_paragraph("使用 GNU 工具"), "使用 GNU 工具");
  EXPECT_EQ(clean_paragraph("第 12 章"), "第 12 章");
}

TEST(ParagraphText, CjkClassesAreTheDocumentedRanges) {
  for (uint32_t cp : {0x3400u, 0x4DBFu, 0x4E00u, 0x9FFFu, 0xF900u, 0xFAFFu, 0x20000u, 0x2FFFFu})
    EXPECT_TRUE(is_cjk_ideograph(cp)) << std::hex << cp;
  for (uint32_t cp : {0x33FFu, 0x4DC0u, 0xA000u, 0x3002u, 0xFF01u, 0x3042u, 0x30000u, uint32_t('a')})
    EXPECT_FALSE(is_cjk_ideograph(cp)) << std::hex << cp;
  EXPECT_TRUE(is_cjk_text(0x3002));           // 。
  EXPECT_TRUE(is_cjk_text(0xFF0C));           // ，
  EXPECT_FALSE(is_cjk_text(0x3042));          // hiragana is not in the class
  EXPECT_EQ(count_cjk("中文abc，。𠀀"), 3u);  // U+20000 counts, punctuation does not
}

TEST(ParagraphText, CalibrationFilterNeedsEightIdeographsAndThirtyPercent) {
  const ParagraphFilter& f = kCalibrationFilter;
  EXPECT_TRUE(f.keeps("一二三四五六七八"));
  EXPECT_FALSE(f.keeps("一二三四五六七"));  // 7 ideographs
  // 8 ideographs of 26 non-space characters: 30.8% passes; of 27: 29.6% does not.
  EXPECT_TRUE(f.keeps("一二三四五六七八" + std::string(18, 'x')));
  EXPECT_FALSE(f.keeps("一二三四五六七八" + std::string(19, 'x')));
  // Spaces do not count towards the share.
  EXPECT_TRUE(f.keeps("一二三四五六七八 " + std::string(9, 'x') + " " + std::string(9, 'x')));
  // CJK punctuation is not an ideograph but counts as a character.
  EXPECT_FALSE(f.keeps(std::string("一二三四五六七") + "。"));
  EXPECT_FALSE(f.keeps(""));
}

TEST(ParagraphText, EvaluationFilterIsLooser) {
  const ParagraphFilter& f = kEvaluationFilter;
  EXPECT_TRUE(f.keeps("一二三四"));
  EXPECT_FALSE(f.keeps("一二三"));
  // 4 of 20 non-space characters is 20%: kept; of 21 it is not. The calibration filter drops both.
  EXPECT_TRUE(f.keeps("一二三四" + std::string(16, 'a')));
  EXPECT_FALSE(f.keeps("一二三四" + std::string(17, 'a')));
  EXPECT_FALSE(kCalibrationFilter.keeps("一二三四" + std::string(16, 'a')));
}

TEST(ParagraphText, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(valid_utf8("ok"), "ok");
  EXPECT_EQ(valid_utf8("中"), "中");
  EXPECT_EQ(valid_utf8("a\xFF"
                       "b"),
            "a\uFFFD"
            "b");
  // A truncated 3-byte sequence is one maximal subpart: one U+FFFD.
  EXPECT_EQ(valid_utf8("\xE4\xB8"
                       "a"),
            "\uFFFD"
            "a");
  // Overlong and surrogate encodings are refused byte by byte after the lead.
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\uFFFD\uFFFD");
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");
  // clean_paragraph never passes bad bytes through.
  EXPECT_EQ(clean_paragraph("x\x80y"), "x\uFFFDy");
}

TEST(ParagraphText, CodePointsAreCounted) {
  EXPECT_EQ(count_code_points(""), 0u);
  EXPECT_EQ(count_code_points("a中𠀀"), 3u);
}

TEST(ParagraphText, TrimDropsUnicodeWhitespaceAtTheEnds) {
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim(" \t\u3000 "), "");
  EXPECT_EQ(trim("\u3000 中 文\u00A0\n"), "中 文");  // ideographic space and NBSP are whitespace
  EXPECT_EQ(trim("a"), "a");
}

}  // namespace
}  // namespace bonsai::datasets
