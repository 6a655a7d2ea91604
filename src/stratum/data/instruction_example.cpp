#include "stratum/data/instruction_example.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/core/json_file.h"
#include "stratum/data/jinja/error.h"

namespace stratum::data {
namespace {

using ojson = nlohmann::ordered_json;

// The record as the shared untrusted-JSON reader checks it (depth, repeated
// keys, numbers), then again with its key order kept: tools and messages
// reach templates that print them (tojson), in the order the file gives.
ojson parse_record(std::string_view line, const std::string& where) {
  try {
    parse_json_text(line, where, "a JSON Lines record");
  } catch (const ConfigError& e) {
    std::string problems;
    for (const auto& p : e.problems()) problems += (problems.empty() ? "" : "; ") + p;
    throw Error(where + ": not a JSON Lines record: " + problems);
  }
  return ojson::parse(line);
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

void check_messages(const ojson& messages, const std::string& where, const char* key) {
  if (!messages.is_array() || messages.empty())
    throw Error(where + ": \"" + key + "\" is not a non-empty list of messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    const std::string at = where + ": " + key + "[" + std::to_string(i) + "]";
    if (!m.is_object()) throw Error(at + " is not an object");
    if (!m.contains("role") || !m["role"].is_string()) throw Error(at + " has no string \"role\"");
    if (m.contains("content") && !m["content"].is_string() && !m["content"].is_array() && !m["content"].is_null() &&
        !m["content"].is_object())
      throw Error(at + ": \"content\" is neither a string, a list, an object nor null");
  }
}

std::string render(const ChatFormat& chat, const ojson& messages, bool add_generation_prompt, const ojson& tools,
                   const std::string& where) {
  ojson variables = ojson::parse(chat.variables_json);
  if (!tools.is_null()) variables["tools"] = tools;
  try {
    return chat.chat_template->render(messages, add_generation_prompt, variables);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

void finish(InstructionExample& ex, const std::string& where, InstructionStats* stats) {
  if (ex.tokens.empty()) throw Error(where + ": the example has no tokens");
  if (stats) {
    ++stats->examples;
    stats->tokens += static_cast<int64_t>(ex.tokens.size());
    stats->trained_tokens += std::count(ex.loss_mask.begin(), ex.loss_mask.end(), uint8_t{1});
  }
}

InstructionExample prompt_completion_text(const std::string& prompt, const std::string& completion,
                                          const Tokenizer& tokenizer, const std::string& where, InstructionStats* stats) {
  InstructionExample ex;
  ex.tokens = tokenizer.encode_with_special_tokens(prompt + completion);
  if (tokenizer.eos_id() >= 0 && (ex.tokens.empty() || ex.tokens.back() != tokenizer.eos_id()))
    ex.tokens.push_back(tokenizer.eos_id());
  std::vector<int32_t> prompt_ids = tokenizer.prefix_tokens();
  const std::vector<int32_t> body = tokenizer.encode(prompt);
  prompt_ids.insert(prompt_ids.end(), body.begin(), body.end());
  if (stats && common_prefix(prompt_ids, ex.tokens) != prompt_ids.size()) ++stats->prompt_prefix_mismatches;
  const size_t masked = std::min(prompt_ids.size(), ex.tokens.size());
  ex.loss_mask.assign(ex.tokens.size(), 1);
  std::fill(ex.loss_mask.begin(), ex.loss_mask.begin() + static_cast<std::ptrdiff_t>(masked), uint8_t{0});
  finish(ex, where, stats);
  return ex;
}

// The number of leading tokens of `ids` (the encoding of `text`) that the
// encoding of text[:chars] shares.
size_t token_boundary(const Tokenizer& tokenizer, const std::string& text, size_t chars,
                      const std::vector<int32_t>& ids, InstructionStats* stats) {
  if (chars == 0) return 0;
  if (chars >= text.size()) return ids.size();
  const std::vector<int32_t> prefix = tokenizer.encode(std::string_view(text).substr(0, chars));
  const size_t n = common_prefix(prefix, ids);
  if (n != prefix.size() && stats) ++stats->straddling_boundaries;
  return n;
}

ojson chat_tools(const ojson& record, const std::string& where) {
  if (!record.contains("tools") || record["tools"].is_null()) return nullptr;
  if (!record["tools"].is_array()) throw Error(where + ": \"tools\" is not a list");
  return record["tools"];
}

}  // namespace

InstructionExample tokenize_conversation(const ojson& messages, const ojson& tools, const Tokenizer& tokenizer,
                                         const ChatFormat& chat, const std::string& where, InstructionStats* stats) {
  check_messages(messages, where, "messages");
  const std::string text = render(chat, messages, false, tools, where);
  InstructionExample ex;
  ex.tokens = tokenizer.encode(text);
  ex.loss_mask.assign(ex.tokens.size(), 0);
  bool any_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    any_assistant = true;
    const ojson before_msgs(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i));
    const ojson upto_msgs(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    const std::string before = i == 0 ? std::string() : render(chat, before_msgs, true, tools, where);
    const std::string upto = render(chat, upto_msgs, false, tools, where);
    if (upto.compare(0, before.size(), before) != 0 || text.compare(0, upto.size(), upto) != 0)
      throw Error(where + ": the chat template breaks the prefix rule at messages[" + std::to_string(i) +
                  "]: the render of the messages before it with add_generation_prompt is not a prefix of the render "
                  "up to it, or that is not a prefix of the whole render, so its assistant span cannot be found");
    const size_t from = token_boundary(tokenizer, text, before.size(), ex.tokens, stats);
    const size_t to = token_boundary(tokenizer, text, upto.size(), ex.tokens, stats);
    for (size_t k = from; k < to; ++k) ex.loss_mask[k] = 1;
  }
  if (!any_assistant) throw Error(where + ": no assistant message: nothing to train on");
  finish(ex, where, stats);
  return ex;
}

const char* instruction_form_name(InstructionForm form) {
  switch (form) {
    case InstructionForm::chat: return "chat";
    case InstructionForm::prompt_completion: return "prompt-completion";
    case InstructionForm::any: break;
  }
  return "any";
}

InstructionExample tokenize_instruction_record(std::string_view line, const Tokenizer& tokenizer, const ChatFormat* chat,
                                               const std::string& where, InstructionStats* stats, InstructionForm form) {
  const ojson record = parse_record(line, where);
  if (!record.is_object()) throw Error(where + ": not a JSON object");
  const bool has_messages = record.contains("messages");
  const bool has_prompt = record.contains("prompt") || record.contains("completion");
  if (has_messages == has_prompt)
    throw Error(where + ": expected {\"messages\": [...]} or {\"prompt\": ..., \"completion\": ...} (TRL's forms)");
  // The form the file was declared in (--data chat:FILE / prompt-completion:FILE).
  const bool conversational = has_messages || (record.contains("prompt") && record["prompt"].is_array());
  if (form == InstructionForm::chat && !conversational)
    throw Error(where + ": a prompt-completion record of text, but the file was given as chat (messages); give it as "
                        "prompt-completion:FILE");
  if (form == InstructionForm::prompt_completion && conversational)
    throw Error(where + std::string(": a conversation (") + (has_messages ? "\"messages\"" : "\"prompt\" as messages") +
                "), but the file was given as prompt-completion (text); give it as chat:FILE");
  auto need_chat = [&]() -> const ChatFormat& {
    if (!chat || !chat->chat_template)
      throw Error(where + ": a conversation needs a chat template (the model's tokenizer_config.json has none, or none "
                          "was given)");
    return *chat;
  };
  if (has_messages) return tokenize_conversation(record["messages"], chat_tools(record, where), tokenizer, need_chat(), where, stats);
  if (!record.contains("prompt") || !record.contains("completion"))
    throw Error(where + ": a prompt-completion record needs both \"prompt\" and \"completion\"");
  const ojson& prompt = record["prompt"];
  const ojson& completion = record["completion"];
  if (prompt.is_string() && completion.is_string())
    return prompt_completion_text(prompt.get<std::string>(), completion.get<std::string>(), tokenizer, where, stats);
  if (prompt.is_array() && completion.is_array()) {
    const ChatFormat& format = need_chat();
    check_messages(prompt, where, "prompt");
    check_messages(completion, where, "completion");
    ojson all = prompt;
    for (const auto& m : completion) all.push_back(m);
    const ojson tools = chat_tools(record, where);
    const std::string text = render(format, all, false, tools, where);
    const std::string head = render(format, prompt, true, tools, where);
    InstructionExample ex;
    ex.tokens = tokenizer.encode(text);
    const size_t masked = token_boundary(tokenizer, text, text.compare(0, head.size(), head) == 0 ? head.size() : 0,
                                         ex.tokens, stats);
    if (text.compare(0, head.size(), head) != 0)
      throw Error(where + ": the chat template does not render the prompt (with add_generation_prompt) as a prefix of "
                          "prompt + completion");
    ex.loss_mask.assign(ex.tokens.size(), 1);
    std::fill(ex.loss_mask.begin(), ex.loss_mask.begin() + static_cast<std::ptrdiff_t>(masked), uint8_t{0});
    finish(ex, where, stats);
    return ex;
  }
  throw Error(where + ": \"prompt\" and \"completion\" must both be strings or both be lists of messages");
}

}  // namespace stratum::data
