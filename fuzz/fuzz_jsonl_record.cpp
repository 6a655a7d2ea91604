// A JSON Lines record: the bytes are one line -> the document's text, or an
// error naming the line (the shared untrusted-JSON reader underneath: nesting
// capped, repeated keys refused).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "stratum/core/error.h"
#include "stratum/data/jsonl_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  try {
    const std::string text = stratum::data::jsonl_document_text(line, "fuzz.jsonl:1 (byte 0)");
    if (text.size() > size) __builtin_trap();  // the text comes from the line: it cannot be longer
  } catch (const stratum::Error&) {
  }
  return 0;
}
