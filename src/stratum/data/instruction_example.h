#pragma once
// One instruction-tuning example as TRL's SFTTrainer makes it, from one
// JSON Lines record: token ids and a per-token loss mask (1: the token is a
// label the loss trains on; the mask of token t says whether the prediction
// made at t - 1 counts). Plain C++, no torch.
//
// Records, in TRL's dataset forms:
//   {"prompt": "...", "completion": "..."}   (language modeling, prompt-completion)
//       ids = the tokenizer's own encoding of prompt + completion with its
//       special tokens (BOS), then EOS when the encoding does not end with it
//       (TRL appends eos_token to the completion); the mask is 0 on the first
//       len(encoding of the prompt) tokens, 1 after, as TRL's completion_mask.
//   {"messages": [{"role": ..., "content": ...}, ...]}   (conversational)
//       ids = the tokenizer's encoding, without special tokens, of the chat
//       template's render (apply_chat_template(tokenize=True)); the mask is 1
//       on the assistant turns only. Each assistant message i is found by
//       rendering prefixes: render(messages[:i], add_generation_prompt=True)
//       must be a prefix of render(messages[:i + 1]), which must be a prefix
//       of the whole render (else an error naming i); its span is the text
//       between. A span boundary at text offset k falls after the leading
//       tokens the encoding of text[:k] shares with the encoding of the whole
//       text, so a token that straddles a boundary belongs to what follows it
//       (counted in InstructionStats::straddling_boundaries).
//   {"prompt": [messages], "completion": [messages]}   (conversational prompt-completion)
//       ids as for messages of prompt + completion; the mask is 0 on the
//       tokens of render(prompt, add_generation_prompt=True), 1 after.
//   A record's "tools" (a list) is passed to the template as `tools`.
//
// Conversations need a chat template; its special tokens must be tokens the
// tokenizer's encode() cuts out of text (Hugging Face tokenizer.json added
// tokens are; a SentencePiece model's control tokens such as <s> are not).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stratum/data/chat_template.h"
#include "stratum/data/tokenizer.h"

namespace stratum::data {

struct InstructionExample {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask;  // one per token, 0 or 1
};

// What conversational records are rendered with: the template and the
// variables it gets besides messages (bos_token, eos_token, date_string ...).
struct ChatFormat {
  std::shared_ptr<const ChatTemplate> chat_template;
  std::string variables_json = "{}";  // a JSON object
};

// The form --data says a file is in: "chat" (messages, or prompt and
// completion as lists of messages) or "prompt-completion" (text); `any`
// takes either. A record of another form is an error naming its line.
enum class InstructionForm { any, chat, prompt_completion };
const char* instruction_form_name(InstructionForm form);

struct InstructionStats {
  int64_t examples = 0, tokens = 0, trained_tokens = 0;
  int64_t straddling_boundaries = 0;  // span boundaries inside a token (see above)
  int64_t prompt_prefix_mismatches = 0;  // prompt-completion: the prompt's encoding is not a prefix (TRL warns)
};

// One record (one JSONL line) to an example. `where` names it in errors
// ("data.jsonl:3 (byte 120)"). Throws stratum::Error "<where>: ...": not
// JSON or nested too deep or a key twice (the shared untrusted-JSON reader),
// not one of the forms above, a field of the wrong type, a conversation
// without a chat format or without an assistant message, a template error
// (its line and column), a template that breaks the prefix rule, an empty
// example.
InstructionExample tokenize_instruction_record(std::string_view line, const Tokenizer& tokenizer,
                                               const ChatFormat* chat, const std::string& where,
                                               InstructionStats* stats = nullptr,
                                               InstructionForm form = InstructionForm::any);

// The same for records already parsed (tests): messages form.
InstructionExample tokenize_conversation(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                         const Tokenizer& tokenizer, const ChatFormat& chat, const std::string& where,
                                         InstructionStats* stats = nullptr);

}  // namespace stratum::data
