#include "stratum/data/sentencepiece_tokenizer.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/json_file.h"
#include "stratum/data/sentencepiece_model_check.h"
#include "stratum/data/tokenizer_file_util.h"

#ifdef STRATUM_WITH_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace stratum::data {

#ifndef STRATUM_WITH_SENTENCEPIECE

struct SentencePieceTokenizer::Impl {};
bool sentencepiece_available() { return false; }
std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load_from_bytes(const std::string&,
                                                                                const std::string& path) {
  return load(path);
}
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

namespace {

// tokenizer_config.json: a few KB, up to a few MB with chat templates.
constexpr size_t kMaxTokenizerConfigBytes = size_t{16} << 20;

// add_bos_token / add_eos_token: true, false, or null or absent (the default;
// Hugging Face writes a None as null).
bool read_flag(const nlohmann::json& config, const char* key, bool fallback, const std::string& path) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    throw Error(path + ": " + key + " is " + it->type_name() + " " + it->dump().substr(0, 40) +
                ", expected true or false; fix the tokenizer_config.json or remove the key");
  return it->get<bool>();
}

}  // namespace

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load_from_bytes(const std::string& bytes,
                                                                                const std::string& path) {
  check_sentencepiece_model(bytes, path);
  auto impl = std::make_unique<Impl>();
  const auto status = impl->processor.LoadFromSerializedProto(bytes);
  if (!status.ok()) throw Error(path + ": not a SentencePiece model: " + status.ToString());
  impl->files = {path};
  impl->name = detail::tokenizer_name("spm", impl->processor.GetPieceSize(), detail::fnv1a(bytes));
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(impl)));
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  const std::string bytes = fs::read_regular_file(path, kMaxSentencePieceModelBytes, "a SentencePiece tokenizer.model");
  auto tokenizer = load_from_bytes(bytes, path);
  Impl& impl = *tokenizer->impl_;
  const std::string config_path = detail::tokenizer_config_beside(path);
  if (fs::exists(config_path)) {
    const nlohmann::json config = read_json_file(config_path, kMaxTokenizerConfigBytes, "a tokenizer_config.json");
    if (!config.is_object())
      throw Error(config_path + ": a tokenizer_config.json must be a JSON object, but this is " +
                  config.type_name());
    impl.files.push_back(config_path);
    impl.add_bos = read_flag(config, "add_bos_token", true, config_path);
    impl.add_eos = read_flag(config, "add_eos_token", false, config_path);
    // The name covers the flags too: they change every tokenized sequence.
    const uint64_t hash =
        (detail::fnv1a(bytes) ^ (impl.add_bos ? 1u : 0u) ^ (impl.add_eos ? 2u : 0u)) * 0x100000001b3ull;
    impl.name = detail::tokenizer_name("spm", impl.processor.GetPieceSize(), hash);
  }
  return tokenizer;
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
