#include "stratum/core/shorten.h"

namespace stratum {

std::string shorten_for_message(std::string_view text, size_t max_length) {
  if (text.size() <= max_length) return std::string(text);
  return std::string(text.substr(0, 40)) + "... (" + std::to_string(text.size()) + " characters)";
}

}  // namespace stratum
