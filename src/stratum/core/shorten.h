#pragma once
// What a message shows of a name, key or value that may be huge: a megabyte
// key read from a file must not fill the terminal (or the log).
#include <cstddef>
#include <string>
#include <string_view>

namespace stratum {

// The text itself up to max_length bytes, else its first 40 (fewer rather than
// split a UTF-8 character) + "... (N characters)", N counting bytes.
std::string shorten_for_message(std::string_view text, size_t max_length = 64);

}  // namespace stratum
