#include "stratum/core/shorten.h"

namespace stratum {

std::string shorten_for_message(std::string_view text, size_t max_length) {
  if (text.size() <= max_length) return std::string(text);
  size_t cut = 40;
  // Not inside a UTF-8 character: back off over its continuation bytes (10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " characters)";
}

}  // namespace stratum
