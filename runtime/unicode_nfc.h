// Unicode NFC (canonical composition), Hugging Face's "NFC" normalizer, via utf8proc.
#pragma once
#include <string>
#include <string_view>

namespace bonsai {

// NFC of `in`. Text that is not valid UTF-8 is returned unchanged: Hugging Face cannot take it
// at all, and leaving it alone keeps every byte encodable.
std::string nfc(std::string_view in);

}  // namespace bonsai
