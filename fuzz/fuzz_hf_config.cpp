// A Hugging Face config.json from a stranger: text -> the shared JSON reader
// -> model_config_from_hf. A stratum::Error is an answer; any other exception
// (nlohmann's type errors included), a crash, a hang or a sanitizer report
// (a narrowed or overflowing integer) is a bug. An accepted config must hold
// validate()'s limits, and its parameter count must be within them too.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/core/json_file.h"
#include "stratum/models/hf_config.h"
#include "stratum/models/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace m = stratum::models;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  m::ModelConfig c;
  try {
    const nlohmann::json j = stratum::parse_json_text(text, "config.json", "a Hugging Face config.json");
    c = m::model_config_from_hf(j, "fuzz");
  } catch (const stratum::Error&) {
    return 0;
  }
  if (c.vocab_size < 1 || c.vocab_size > m::kMaxVocabSize || c.hidden < 1 || c.hidden > m::kMaxHidden ||
      c.layers < 1 || c.layers > m::kMaxLayers || c.ffn_hidden < 1 || c.ffn_hidden > m::kMaxFfnHidden ||
      c.max_seq_len < 1 || c.max_seq_len > m::kMaxSeqLen || c.heads < 1 || c.hidden % c.heads != 0 ||
      c.kv_heads < 1 || c.heads % c.kv_heads != 0 || c.dropout < 0 || c.dropout >= 1 || c.attention_dropout >= 1)
    __builtin_trap();
  if (c.arch == "llama" && c.rope_scaling_factor != 0 && c.rope_scaling_factor < 1) __builtin_trap();
  const int64_t n = m::parameter_count(c);
  if (n < 1 || n > m::kMaxParameters) __builtin_trap();
  // What an exported checkpoint writes reads back as the same model.
  const m::ModelConfig back = m::model_config_from_hf(m::hf_config_json(c), "fuzz");
  if (m::parameter_count(back) != n) __builtin_trap();
  (void)m::describe(c);
  return 0;
}
