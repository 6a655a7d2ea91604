#include "stratum/data/sentencepiece_tokenizer.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/data/tokenizer_file_util.h"

#ifdef STRATUM_WITH_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace stratum::data {

#ifndef STRATUM_WITH_SENTENCEPIECE

struct SentencePieceTokenizer::Impl {};
bool sentencepiece_available() { return false; }
std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  throw Error(path + ": this build of Stratum has no libsentencepiece; install libsentencepiece-dev "
                     "(Debian/Ubuntu) and rebuild");
}
SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;
std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view) const { return {}; }
std::vector<int32_t> SentencePieceTokenizer::prefix_tokens() const { return {}; }
std::vector<int32_t> SentencePieceTokenizer::suffix_tokens() const { return {}; }
std::string SentencePieceTokenizer::decode(const std::vector<int32_t>&) const { return {}; }
int64_t SentencePieceTokenizer::vocab_size() const { return 0; }
std::string SentencePieceTokenizer::name() const { return {}; }
int32_t SentencePieceTokenizer::bos_id() const { return -1; }
int32_t SentencePieceTokenizer::eos_id() const { return -1; }
std::vector<std::string> SentencePieceTokenizer::files() const { return {}; }

#else

bool sentencepiece_available() { return true; }

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
  std::string name;
  bool add_bos = true, add_eos = false;
  std::vector<std::string> files;  // tokenizer.model, and its tokenizer_config.json if any
};

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  const std::string bytes = detail::read_bytes(path);
  const auto status = impl->processor.LoadFromSerializedProto(bytes);
  if (!status.ok()) throw Error(path + ": not a SentencePiece model: " + status.ToString());
  uint64_t hash = detail::fnv1a(bytes);
  const std::string config_path = detail::tokenizer_config_beside(path);
  impl->files = {path};
  if (std::ifstream(config_path)) {
    impl->files.push_back(config_path);
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(detail::read_bytes(config_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(config_path + ": not JSON: " + e.what());
    }
    impl->add_bos = config.value("add_bos_token", true);
    impl->add_eos = config.value("add_eos_token", false);
    hash = (hash ^ (impl->add_bos ? 1u : 0u) ^ (impl->add_eos ? 2u : 0u)) * 0x100000001b3ull;
  }
  impl->name = detail::tokenizer_name("spm", impl->processor.GetPieceSize(), hash);
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(impl)));
}

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = impl_->processor.Encode(text, &ids);
  if (!status.ok()) throw Error("SentencePiece encode failed: " + status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::vector<int32_t> SentencePieceTokenizer::prefix_tokens() const {
  if (impl_->add_bos && bos_id() >= 0) return {bos_id()};
  return {};
}

std::vector<int32_t> SentencePieceTokenizer::suffix_tokens() const {
  if (impl_->add_eos && eos_id() >= 0) return {eos_id()};
  return {};
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  const int size = impl_->processor.GetPieceSize();
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    std::string piece;
    impl_->processor.Decode(run, &piece);
    out += piece;
    run.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || id >= size) {  // outside the model: U+FFFD, as the other tokenizers do
      flush();
      out += "\xEF\xBF\xBD";
    } else {
      run.push_back(id);
    }
  }
  flush();
  return out;
}

int64_t SentencePieceTokenizer::vocab_size() const { return impl_->processor.GetPieceSize(); }
std::string SentencePieceTokenizer::name() const { return impl_->name; }
int32_t SentencePieceTokenizer::bos_id() const { return impl_->processor.bos_id(); }
int32_t SentencePieceTokenizer::eos_id() const { return impl_->processor.eos_id(); }
std::vector<std::string> SentencePieceTokenizer::files() const { return impl_->files; }

#endif

}  // namespace stratum::data
