#include "stratum/data/json_node.h"

#include <limits>

#include "stratum/core/error.h"

namespace stratum::data::detail {

using json = nlohmann::json;

void Node::fail(const std::string& what) const {
  throw Error(*file_ + ": " + (path_.empty() ? std::string() : path_ + ": ") + what);
}

Node Node::at(const std::string& key) const {
  object();
  auto it = value_->find(key);
  if (it == value_->end()) fail("has no \"" + key + "\"");
  return Node(*it, child_path(key), *file_);
}

Node Node::get(const std::string& key) const {
  static const json null;
  object();
  auto it = value_->find(key);
  return Node(it == value_->end() ? null : *it, child_path(key), *file_);
}

Node Node::at(size_t i) const { return Node((*value_)[i], path_ + "[" + std::to_string(i) + "]", *file_); }

Node Node::member(const std::string& key, const json& v) const {
  return Node(v, path_ + "[\"" + key + "\"]", *file_);
}

const json& Node::object() const {
  if (!value_->is_object()) expected("an object");
  return *value_;
}

const json& Node::array() const {
  if (!value_->is_array()) expected("an array");
  return *value_;
}

std::string Node::string() const {
  if (!value_->is_string()) expected("a string");
  return value_->get_ref<const std::string&>();
}

bool Node::boolean() const {
  if (!value_->is_boolean()) expected("true or false");
  return value_->get<bool>();
}

int64_t Node::integer() const {
  if (!value_->is_number_integer()) expected("an integer");
  if (value_->is_number_unsigned()) {
    const uint64_t v = value_->get<uint64_t>();
    if (v > uint64_t(std::numeric_limits<int64_t>::max())) fail("the integer " + value_->dump() + " is too large");
    return static_cast<int64_t>(v);
  }
  return value_->get<int64_t>();
}

std::string Node::string_or(const std::string& key, const std::string& fallback) const {
  const Node n = get(key);
  return n.is_null() ? fallback : n.string();
}

bool Node::boolean_or(const std::string& key, bool fallback) const {
  const Node n = get(key);
  return n.is_null() ? fallback : n.boolean();
}

void Node::expected(const std::string& what) const {
  std::string found = value_->dump();
  if (found.size() > 40) found = found.substr(0, 37) + "...";
  fail("expected " + what + ", found " + std::string(value_->type_name()) + " " + found);
}

}  // namespace stratum::data::detail
