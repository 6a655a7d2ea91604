// A chat template from a stranger (tokenizer_config.json's "chat_template"):
// the bytes are the template, parsed and rendered over a fixed conversation
// with tools, under small limits. A stratum::Error (a syntax error, a runtime
// error, the template's raise_exception, a limit reached) is an answer; any
// other exception, a crash, a hang or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/data/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Héllo 👋 <|eot_id|>"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "weather01", "type": "function",
      "function": {"name": "f", "arguments": {"x": 1.5, "y": [true, null]}}}]},
    {"role": "tool", "tool_call_id": "weather01", "content": "{\"ok\": 1}"},
    {"role": "assistant", "content": "Done."}])");
  static const nlohmann::ordered_json variables = nlohmann::ordered_json::parse(R"({
    "bos_token": "<s>", "eos_token": "</s>", "date_string": "26 Jul 2024",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})");
  stratum::data::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_work = 200'000;
  limits.max_sequence = 10'000;
  try {
    const stratum::data::ChatTemplate t(std::string(reinterpret_cast<const char*>(data), size), "fuzz.jinja", limits);
    const std::string out = t.render(messages, true, variables);
    if (out.size() > limits.max_output_bytes) __builtin_trap();  // the output limit held
  } catch (const stratum::Error&) {
  }
  return 0;
}
