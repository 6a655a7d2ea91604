#include "stratum/core/json_file.h"

#include <set>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/shorten.h"

namespace stratum {
namespace {

// At most this many repeated keys are named; the rest are counted.
constexpr size_t kMaxNamedDuplicates = 100;
constexpr size_t kMaxShownKey = 64;

// Collects each repeated key's path while the parser runs (long keys
// shortened: paths of megabyte keys must not pile up).
class DuplicateKeys {
 public:
  bool on_event(int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        frames_.push_back(Frame{event == E::array_start, child_path(), {}, {}, 0});
        break;
      case E::object_end:
      case E::array_end:
        frames_.pop_back();
        if (!frames_.empty() && frames_.back().is_array) ++frames_.back().index;
        break;
      case E::key: {
        Frame& f = frames_.back();
        const std::string& key = parsed.get_ref<const std::string&>();
        f.key = shorten_for_message(key, kMaxShownKey);
        if (!f.keys.insert(key).second) {
          if (found_.size() < kMaxNamedDuplicates) found_.push_back(child_path());
          else ++more_;
        }
        break;
      }
      case E::value:
        if (!frames_.empty() && frames_.back().is_array) ++frames_.back().index;
        break;
    }
    return true;
  }
  const std::vector<std::string>& found() const { return found_; }
  size_t more() const { return more_; }

 private:
  struct Frame {
    bool is_array;
    std::string path;
    std::set<std::string> keys;
    std::string key;  // the object's current key
    int64_t index;    // the array's current element
  };
  // The path of the value the innermost frame is reading ("" at the top).
  std::string child_path() const {
    if (frames_.empty()) return "";
    const Frame& f = frames_.back();
    if (f.is_array) return f.path + "[" + std::to_string(f.index) + "]";
    return f.path.empty() ? f.key : f.path + "." + f.key;
  }
  std::vector<Frame> frames_;
  std::vector<std::string> found_;
  size_t more_ = 0;
};

}  // namespace

std::string json_line_column(std::string_view text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

nlohmann::json parse_json_text(std::string_view text, const std::string& source, const std::string& kind,
                               int max_depth) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw ConfigError(source, {"the file is empty; " + kind + " is a JSON object {...}"});
  // Checked first: the parser's time (and its paths) grow with the depth.
  if (const auto at = find_excess_json_nesting(text, max_depth))
    throw ConfigError(source + ":" + json_line_column(text, *at + 1),
                      {"JSON nested deeper than " + std::to_string(max_depth) + " levels; " + kind +
                       " needs a handful (is this the right file?)"});
  DuplicateKeys duplicates;
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(
        text.begin(), text.end(),
        [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          return duplicates.on_event(depth, event, parsed);
        },
        /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: ..."; keep the reason.
    std::string reason = e.what();
    auto pos = reason.find(": ");
    if (pos != std::string::npos) reason = reason.substr(pos + 2);
    throw ConfigError(source + ":" + json_line_column(text, e.byte), {"invalid JSON: " + shorten_for_message(reason, 300)});
  } catch (const nlohmann::json::out_of_range& e) {
    // A number past double's range (1e999): nlohmann gives no position, only the
    // text "number overflow parsing '1e999'"; its first occurrence is the place.
    const std::string what = e.what();
    const size_t open = what.find('\''), close = what.rfind('\'');
    const std::string number = open < close ? what.substr(open + 1, close - open - 1) : "";
    const size_t at = number.empty() ? std::string::npos : text.find(number);
    throw ConfigError(at == std::string::npos ? source : source + ":" + json_line_column(text, at + 1),
                      {"invalid JSON: the number " + shorten_for_message(number) +
                       " is out of range (beyond a double's 1.8e308)"});
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(source, {std::string("invalid JSON: ") + e.what()});
  }
  std::vector<std::string> problems;
  for (const std::string& path : duplicates.found())
    problems.push_back(path + ": given more than once in one object; JSON keeps only the last value, so keep one");
  if (duplicates.more() > 0)
    problems.push_back("... and " + std::to_string(duplicates.more()) + " more keys given more than once");
  if (!problems.empty()) throw ConfigError(source, problems);
  return json;
}

nlohmann::json read_json_file(const std::string& path, size_t max_bytes, const std::string& kind, int max_depth) {
  if (!fs::exists(path)) throw ConfigError(path, {"no such file"});
  if (fs::is_directory(path)) throw ConfigError(path, {"is a directory, not " + kind});
  std::string text;
  try {
    // A FIFO or device (/dev/zero) is refused, and a huge file, before it is read.
    text = fs::read_regular_file(path, max_bytes, kind);
  } catch (const Error& e) {
    std::string reason = e.what();
    if (reason.rfind(path + ": ", 0) == 0) reason = reason.substr(path.size() + 2);
    throw ConfigError(path, {reason});
  }
  return parse_json_text(text, path, kind, max_depth);
}

}  // namespace stratum
