// HTML -> paragraphs (docs/corpus.md, "libreoffice-help-zh-cn" and "debian-handbook").
#include "datasets/html_text.h"

#include <gtest/gtest.h>

#include "datasets/paragraph_text.h"

namespace bonsai::datasets {
namespace {

std::vector<std::string> cleaned(const std::vector<std::string>& raw) {
  std::vector<std::string> out;
  for (const auto& p : raw) {
    std::string c = clean_paragraph(p);
    if (!c.empty()) out.push_back(std::move(c));
  }
  return out;
}

TEST(HtmlText, LibreOfficeHelpPage) {
  const char* page = R"(<!DOCTYPE html>
<html lang="zh-CN"><head><title>查找栏</title>
<script type="text/javascript">var s = "<p>不是正文</p>";</script></head>
<body>
<header id="TopLeftHeader"><a class="logo"><p>LibreOffice 7.4 帮助</p></a></header>
<aside class="leftside"><div id="Index">索引</div></aside>
<div id="DisplayArea">
<h1 id="hd_1">查找栏</h1>
<p class="paragraph">使用 <span class="menuitem">查找</span> 工具栏可以快速搜索
  文档内容。</p>
<!-- <p>注释里的段落</p> -->
<div class="tip"><div class="notetext"><p>提示：按 <span class="keycode">Ctrl</span> + F 打开。</p></div></div>
<br>
<span class="switch"><span class="CALC"><p>只适用于 Calc 的说明</p></span></span>
<table><tr><td>表格里的文字</td></tr></table>
<pre>代码 &lt;b&gt;</pre>
<div class="bookmark_search">书签搜索</div>
<ul><li>第一项 &amp; 更多</li><li>第二项<br/>换行后</li></ul>
<p>a &lt; b 且 c&gt;d, 5 < 6 &#20013;&#x6587; &nbsp;完</p>
</div>
</body></html>)";
  EXPECT_EQ(cleaned(html_paragraphs(page, libreoffice_help_rules())),
            (std::vector<std::string>{"查找栏", "使用查找工具栏可以快速搜索文档内容。", "提示：按 Ctrl + F 打开。",
                                      "第一项 & 更多", "第二项", "换行后", "a < b 且 c>d, 5 < 6 中文完"}));
}

TEST(HtmlText, DebianHandbookPage) {
  const char* page = R"(<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" "x.dtd"><html xmlns="http://www.w3.org/1999/xhtml"><head>
<title>第 6 章</title></head><body><div id="banner"><a><span class="text">Download the ebook</span></a></div>
<p id="title"><a class="left">Product Site</a></p>
<ul class="docnav top"><li class="previous"><a><strong>上一页</strong></a></li></ul>
<div class="chapter"><div class="titlepage"><h1 class="title"><a id="apt"></a>第 6 章 维护和更新：APT 工具</h1></div>
<div class="toc"><dl class="toc"><dt><span class="section">6.1. 编写文件</span></dt></dl></div>
<div class="para">本章介绍 <code class="command">apt</code> 的用法。</div>
<pre class="programlisting">apt-get install 软件包</pre>
<div class="programlisting"><div>示例代码</div></div>
<div class="screen">屏幕输出</div>
<div class="table"><div class="table-contents">表格</div></div>
<div class="index">索引项</div>
<div class="para">第二段<a id="x"/>继续。</div>
</div></body></html>)";
  EXPECT_EQ(cleaned(html_paragraphs(page, debian_handbook_rules())),
            (std::vector<std::string>{"第 6 章维护和更新：APT 工具", "本章介绍 apt 的用法。", "第二段继续。"}));
}

TEST(HtmlText, EndTagsCloseWhatIsOpenInside) {
  // </div> closes the unclosed <span class="switch"> inside it, so the text after is kept; a
  // stray </table> with no table open changes nothing.
  const char* page = "<div><span class=\"switch\">丢弃<p>也丢弃</div><p>保留</table>的文字</p>";
  EXPECT_EQ(cleaned(html_paragraphs(page, libreoffice_help_rules())), std::vector<std::string>{"保留的文字"});
  // Class lists: any listed class counts; attribute case and quoting vary.
  EXPECT_EQ(cleaned(html_paragraphs("<P CLASS='a code b'>丢弃</P><p class=keep>留下</p>", libreoffice_help_rules())),
            std::vector<std::string>{"留下"});
}

TEST(HtmlText, CharacterReferences) {
  EXPECT_EQ(decode_html_entities("&amp;&lt;&gt;&quot;&apos;"), "&<>\"'");
  EXPECT_EQ(decode_html_entities("&#20013;&#x6587;&#X6587;"), "中文文");
  EXPECT_EQ(decode_html_entities("&amp without semicolon &copy2"), "& without semicolon \u00a92");
  EXPECT_EQ(decode_html_entities("&unknown; & &#; &#xZ;"), "&unknown; & &#; &#xZ;");
  EXPECT_EQ(decode_html_entities("&#150;&#0;&#1114112;&#xD800;"), "\u2013\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(decode_html_entities("&#99999999999999999999;"), "\uFFFD");
}

TEST(HtmlText, BadInputNeverCrashes) {
  for (const char* page : {"<", "<p", "<p class=\"x", "</", "</p", "<!--", "<!x", "<?x", "<script>", "<script>x</scr",
                           "&", "&#", "&#x", "<p>\xFF\xFE</p>", "<a b=>", "<a =x>"}) {
    EXPECT_NO_THROW(html_paragraphs(page, libreoffice_help_rules())) << page;
  }
  // An unterminated tag is text; an unterminated script swallows the rest.
  EXPECT_EQ(html_paragraphs("文<p class=\"x", libreoffice_help_rules()), std::vector<std::string>{"文<p class=\"x"});
  EXPECT_TRUE(html_paragraphs("<script>var a = '文字';", libreoffice_help_rules()).empty());
}

}  // namespace
}  // namespace bonsai::datasets
