// Prose paragraphs of a man page written in troff (man(7) macros), for manpages-zh.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace bonsai::datasets {

// True when the page is only a `.so` include of another page (nothing of its own to read).
bool troff_is_so_stub(std::string_view page);

// The paragraphs of a page, markup stripped; the rules (docs/corpus.md):
//  - comment lines (`.\"`, `'\"`, `\"`) are ignored; `.de`/`.am`/`.ig` bodies up to `..` too;
//  - `.nf`..`.fi`, `.EX`..`.EE` (code) and `.TS`..`.TE` (tables) are dropped whole;
//  - `.B .I .SM .SB` keep their arguments joined by spaces, `.BR .IR .RB .RI .BI .IB` (and the
//    link macros `.UR .UE .MT .ME`) joined without; quoted arguments count as one;
//  - `.TP` breaks the paragraph and drops its tag: the next line that would give text;
//  - every other request or macro (`.SH`, `.PP`, `.IP`, `.br`, `.sp`, ...) breaks the paragraph
//    and its arguments are dropped (headings and `.IP` tags are not prose);
//  - a blank line breaks the paragraph; text lines are joined by one space;
//  - escapes are resolved: fonts, sizes, colours, motions, registers and strings give nothing;
//    `\-` `-`, `\e` and `\\` a backslash, `\ ` `\~` `\0` a space, `\(xx` and `\[name]` their
//    character, `\&` `\|` `\^` `\,` `\/` `\%` nothing; `\"` ends the line; `\c` and a trailing
//    `\` join the next line without a space; an unknown escape gives its character.
std::vector<std::string> troff_paragraphs(std::string_view page);

}  // namespace bonsai::datasets
