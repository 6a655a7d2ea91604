#pragma once
// A model directory's chat format as transformers loads it: the template from
// chat_template.jinja beside tokenizer_config.json (transformers 5 saves it
// there) or else tokenizer_config.json's "chat_template" (a string, or a list
// of {"name", "template"} whose "default" is taken), and the named special
// tokens (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
// mask_token; strings or {"content": ...}) that apply_chat_template passes to
// it. Plain C++, no torch.
#include <string>

#include "stratum/data/instruction_example.h"

namespace stratum::data {

// `tokenizer_config` is the path of a tokenizer_config.json. `template_file`,
// when given, is a Jinja file whose text replaces the config's template (the
// config then gives only the special tokens, and may be empty: none). Throws
// stratum::Error naming the file and key: unreadable or not JSON (the shared
// untrusted-JSON reader), no chat template, a template of the wrong type or
// that does not parse (its line and column).
ChatFormat load_chat_format(const std::string& tokenizer_config, const std::string& template_file = "");

}  // namespace stratum::data
