#include "stratum/checkpoint/tags.h"

#include <algorithm>
#include <cctype>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace stratum {
namespace {

constexpr size_t kMaxLatestBytes = 4096;
constexpr size_t kMaxTagLength = 255;

bool is_staging_leftover(const std::string& name) {
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".tmp") || name.rfind("latest.tmp", 0) == 0;
}

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 8; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 8) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

// "global_step9" before "global_step10": digits compare as numbers.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::string x = a.substr(i, ie - i), y = b.substr(j, je - j);
      x.erase(0, std::min(x.find_first_not_of('0'), x.size()));
      y.erase(0, std::min(y.find_first_not_of('0'), y.size()));
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = ie, j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

}  // namespace

std::string tag_name_problem(const std::string& tag) {
  if (tag.empty()) return "the tag is empty";
  if (tag.size() > kMaxTagLength) return "the tag is " + std::to_string(tag.size()) + " characters long (at most 255)";
  if (tag == "." || tag == "..") return "'" + tag + "' is not a tag name";
  for (unsigned char c : tag) {
    if (c == '/') return "a tag names a directory inside the checkpoint directory, without '/'";
    if (c < 0x20 || c == 0x7f) return "the tag holds a control character";
  }
  return "";
}

std::optional<std::string> latest_checkpoint_tag(const std::string& dir) {
  const std::string path = dir + "/latest";
  if (!fs::exists(path) && !fs::is_symlink(path)) return std::nullopt;
  std::string text = fs::read_regular_file(path, kMaxLatestBytes, "the 'latest' tag file", /*follow_symlinks=*/false);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.empty()) throw Error(path + ": empty (it should name the tag to resume from, e.g. global_step100)");
  const std::string why = tag_name_problem(text);
  if (!why.empty()) throw Error(path + ": does not hold a tag name: " + why);
  return text;
}

std::vector<std::string> list_checkpoint_tags(const std::string& dir) {
  std::vector<std::string> tags;
  for (const auto& name : fs::list_directory(dir))
    if (!is_staging_leftover(name) && tag_name_problem(name).empty() && fs::is_directory(dir + "/" + name) &&
        fs::exists(dir + "/" + name + "/manifest.json"))
      tags.push_back(name);
  std::sort(tags.begin(), tags.end(), natural_less);
  return tags;
}

ResumePoint resolve_resume(const std::string& save_dir, const std::string& tag) {
  if (!tag.empty()) {
    const std::string why = tag_name_problem(tag);
    if (!why.empty()) throw Error("tag '" + tag + "': " + why);
    if (!fs::exists(save_dir + "/" + tag + "/manifest.json")) {
      const auto tags = list_checkpoint_tags(save_dir);
      throw Error(save_dir + "/" + tag + ": no such checkpoint" +
                  (tags.empty() ? std::string(" (the directory holds none)") : " (the directory holds " + listed(tags) + ")"));
    }
    return {ResumePoint::Kind::resume, tag, ""};
  }
  if (!fs::exists(save_dir)) return {ResumePoint::Kind::fresh, "", save_dir + " does not exist yet"};
  if (!fs::is_directory(save_dir)) throw Error(save_dir + ": not a directory");
  std::string problem;
  try {
    if (auto latest = latest_checkpoint_tag(save_dir)) {
      if (fs::exists(save_dir + "/" + *latest + "/manifest.json")) return {ResumePoint::Kind::resume, *latest, ""};
      problem = save_dir + "/latest names '" + *latest + "', which is not a checkpoint there";
    }
  } catch (const Error& e) {
    problem = e.what();
  }
  std::vector<std::string> others;
  for (const auto& name : fs::list_directory(save_dir))
    if (!is_staging_leftover(name)) others.push_back(name);
  if (problem.empty() && others.empty())
    return {ResumePoint::Kind::fresh, "", save_dir + " holds no checkpoint yet"};
  if (problem.empty()) problem = save_dir + ": no 'latest' file";
  const auto tags = list_checkpoint_tags(save_dir);
  std::sort(others.begin(), others.end());
  if (tags.empty())
    throw Error(problem + ", and the directory is not empty (it holds " + listed(others) +
                "); refusing to start fresh over it: choose an empty --save-dir");
  throw Error(problem + ", but the directory holds checkpoints " + listed(tags) +
              "; pass --resume-tag " + tags.back() + " (or another) to continue from one, or choose an empty --save-dir");
}

}  // namespace stratum
