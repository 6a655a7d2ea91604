#include "stratum/data/instruction_data.h"

#include <sys/stat.h>

#include <cstdio>
#include <memory>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/data/instruction_file.h"

namespace stratum::data {
namespace {

uint64_t fnv1a(std::string_view s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The chat format, and the declared form when one is (a cache built as
// `any` checked no record's form).
uint64_t format_hash(const ChatFormat* chat, InstructionForm form) {
  const uint64_t h = !chat || !chat->chat_template ? 0 : fnv1a(chat->variables_json, fnv1a(chat->chat_template->text()));
  return form == InstructionForm::any ? h : fnv1a(instruction_form_name(form), h ^ 0x9e3779b97f4a7c15ull);
}

int64_t mtime_ns(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

bool cache_is_fresh(const std::string& cache, const std::string& source, const Tokenizer& tokenizer, uint64_t hash) {
  const int64_t cache_time = mtime_ns(cache);
  if (cache_time < 0 || mtime_ns(source) > cache_time) return false;
  try {
    const InstructionFile file(cache);
    return file.info().tokenizer_name == tokenizer.name() && file.info().vocab_size == tokenizer.vocab_size() &&
           file.info().format_hash == hash;
  } catch (const Error&) {
    return false;  // damaged: rebuild
  }
}

std::string hex8(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return std::string(buf, 8);
}

}  // namespace

std::string instruction_cache_path(const std::string& jsonl_path, const Tokenizer& tokenizer, const ChatFormat* chat,
                                   const std::string& cache_dir, InstructionForm form) {
  const std::string suffix = "." + tokenizer.name() + "." + hex8(format_hash(chat, form)) + ".strins";
  if (cache_dir.empty()) return jsonl_path + suffix;
  const size_t slash = jsonl_path.rfind('/');
  const std::string base = slash == std::string::npos ? jsonl_path : jsonl_path.substr(slash + 1);
  return cache_dir + "/" + base + "." + hex8(fnv1a(fs::absolute_path(jsonl_path))) + suffix;
}

std::string prepare_instruction_data(const std::string& jsonl_path, const Tokenizer& tokenizer, const ChatFormat* chat,
                                     const InstructionDataOptions& options, InstructionStats* stats) {
  if (!fs::exists(jsonl_path)) throw Error(jsonl_path + ": no such file (instruction data is a JSON Lines file)");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(fs::open_regular_file(jsonl_path, "instruction data"), &std::fclose);
  const std::string cache = instruction_cache_path(jsonl_path, tokenizer, chat, options.cache_dir, options.form);
  const uint64_t hash = format_hash(chat, options.form);
  if (!options.may_write || cache_is_fresh(cache, jsonl_path, tokenizer, hash)) return cache;
  std::vector<InstructionExample> examples;
  InstructionStats counted;
  read_jsonl_lines(file.get(), jsonl_path, options.max_line_bytes, [&](std::string_view line, int64_t number, int64_t byte) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
    examples.push_back(
        tokenize_instruction_record(line, tokenizer, chat, jsonl_line_name(jsonl_path, number, byte), &counted,
                                    options.form));
  });
  if (examples.empty()) throw Error(jsonl_path + ": no records (instruction data needs at least one line)");
  if (!options.cache_dir.empty()) fs::make_directories(options.cache_dir);
  write_instruction_file(cache, examples, tokenizer.name(), tokenizer.vocab_size(), hash);
  if (stats) *stats = counted;
  return cache;
}

}  // namespace stratum::data
