#pragma once
// A checked view of one value of a JSON file from elsewhere (a tokenizer.json
// downloaded from a model hub): every value read is type-checked before use,
// and every error names the file and the key path
// ("pre_tokenizer.pretokenizers[1].pattern.Regex"), what was expected and what
// is there ("expected a string, found number 5"). No nlohmann getter runs on
// unchecked file data. Plain C++, no torch.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace stratum::data::detail {

class Node {
 public:
  // `value` and `file` must outlive the node and every node taken from it.
  Node(const nlohmann::json& value, std::string path, const std::string& file)
      : value_(&value), path_(std::move(path)), file_(&file) {}

  const nlohmann::json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return *file_; }
  bool is_null() const { return value_->is_null(); }

  // Throws stratum::Error: "<file>: <path>: <what>".
  [[noreturn]] void fail(const std::string& what) const;

  // The member `key`, which must be there (an object is required).
  Node at(const std::string& key) const;
  // The member `key`, or null when it is absent.
  Node get(const std::string& key) const;
  bool has(const std::string& key) const { return value_->is_object() && value_->contains(key); }
  // Element i of an array whose size() the caller has read.
  Node at(size_t i) const;
  // The member `key` whose value is `v`, met while iterating over object().
  Node member(const std::string& key, const nlohmann::json& v) const;

  const nlohmann::json& object() const;
  const nlohmann::json& array() const;
  size_t size() const { return array().size(); }
  std::string string() const;
  bool boolean() const;
  // An integer, never a float truncated: 5.7 and 5.0 are refused alike.
  int64_t integer() const;
  // Optional members: absent or null gives the fallback, another type fails.
  std::string string_or(const std::string& key, const std::string& fallback) const;
  bool boolean_or(const std::string& key, bool fallback) const;

 private:
  std::string child_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  [[noreturn]] void expected(const std::string& what) const;

  const nlohmann::json* value_;
  std::string path_;
  const std::string* file_;
};

}  // namespace stratum::data::detail
