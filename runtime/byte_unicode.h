// GPT-2's byte <-> unicode map (bytes_to_unicode in openai/gpt-2 encoder.py): byte-level BPE
// vocabularies spell every byte as one printable code point, so a token text is a string of
// those code points, never raw bytes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace bonsai {

// The code point standing for byte b: printable Latin-1 bytes map to themselves, the other 68
// to U+0100.. in byte order.
uint32_t byte_to_codepoint(uint8_t b);
// The byte a code point stands for, or -1 when it stands for none.
int codepoint_to_byte(uint32_t cp);
// UTF-8 of a code point (cp < 0x110000).
void append_utf8(std::string& out, uint32_t cp);
// Decodes the UTF-8 code point at s[i] and advances i; a malformed or truncated sequence gives
// -1 and advances by one byte.
int32_t next_codepoint(std::string_view s, size_t& i);

}  // namespace bonsai
