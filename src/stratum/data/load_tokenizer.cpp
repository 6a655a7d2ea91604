#include "stratum/data/load_tokenizer.h"

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/data/bpe_tokenizer.h"
#include "stratum/data/hf_tokenizer.h"
#include "stratum/data/sentencepiece_tokenizer.h"

namespace stratum::data {
namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

std::string tokenizer_file_in(const std::string& directory) {
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (fs::exists(directory + "/" + name)) return directory + "/" + name;
  return {};
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  std::string path = spec;
  if (fs::is_directory(spec)) {
    path = tokenizer_file_in(spec);
    if (path.empty()) throw Error(spec + ": the directory holds neither tokenizer.json nor tokenizer.model");
  }
  if (!fs::exists(path))
    throw Error(path + ": no such file (--tokenizer takes 'byte', a tokenizer.json, a tokenizer.model, a model "
                       "directory holding one, or a Stratum BPE merges file)");
  if (ends_with(path, ".json")) return HfTokenizer::load(path);
  if (ends_with(path, ".model")) return SentencePieceTokenizer::load(path);
  return std::make_unique<BpeTokenizer>(BpeTokenizer::load(path));
}

}  // namespace stratum::data
