#pragma once
// JSON from files Stratum did not write (ds_config.json, a model directory's
// config.json and index, tokenizer.json, tokenizer_config.json, JSON Lines
// records): one reader for all of them, so every one is size-capped, read as
// a regular file only, depth-checked before the parser sees it, and refuses a
// key given twice in one object (JSON keeps the last; a tokenizer's vocabulary
// or a config would silently lose the first).
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "stratum/core/json_depth.h"

namespace stratum {

// Throws ConfigError("<source>[:line:column]", problems): empty text, nesting
// deeper than max_depth, invalid JSON, a number beyond a double's range, a key
// given twice in one object. `kind` names what the file should be in the
// messages ("a ds_config.json", "a tokenizer.json").
nlohmann::json parse_json_text(std::string_view text, const std::string& source, const std::string& kind,
                               int max_depth = kMaxJsonDepth);

// fs::read_regular_file(path, max_bytes) (a FIFO, device or directory, or a
// file over max_bytes, refused without reading it), then parse_json_text.
// Every error is a ConfigError whose source is the path.
nlohmann::json read_json_file(const std::string& path, size_t max_bytes, const std::string& kind,
                              int max_depth = kMaxJsonDepth);

// The "line:column" of a byte offset in text (1-based), for messages.
std::string json_line_column(std::string_view text, size_t byte);

}  // namespace stratum
