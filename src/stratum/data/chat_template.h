#pragma once
// Chat templates as Hugging Face transformers renders them: the Jinja text of
// tokenizer_config.json's "chat_template", run by a Jinja2 interpreter subset
// (data/jinja/) with transformers' environment (trim_blocks, lstrip_blocks,
// loop controls, raise_exception, strftime_now, its tojson, namespace(),
// {% generation %}). Matches apply_chat_template(tokenize=False) text for
// text on the templates of Llama-3.1/3.2 Instruct, Qwen2.5 Instruct and
// Mistral-7B-Instruct v0.3 (tests/data/chat_templates). Plain C++, no torch.
//
// Untrusted input: a template from a stranger's file is parsed with bounded
// nesting and rendered under jinja::RenderLimits (output size, work, macro
// depth); every error names the template's line and column.
//
// What jinja2 has and this subset does not (an error naming the tag, filter
// or test, never a wrong render): template inheritance and inclusion
// (extends, block, include, import), {% call %}, recursive loops, *args and
// **kwargs in calls, the filters batch, center, filesizeformat, format,
// groupby, pprint, slice, striptags, truncate, urlencode, wordwrap, xmlattr,
// printf-style '%' on strings, and string methods beyond strip/lstrip/rstrip,
// split/rsplit, splitlines, startswith/endswith, upper/lower/title/
// capitalize, replace, find/rfind/index/rindex/count, join and the is*
// predicates. Known differences: upper/lower/title/capitalize change ASCII
// letters only; tuples are lists (repr [a, b], not (a, b)); dict.keys() and
// items() are lists; integers beyond 64 bits are an error (or floats when
// read from JSON); repr() escapes the unprintable code points of a fixed
// table (controls, separators, format characters), not all of Unicode's.
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "stratum/data/jinja/budget.h"

namespace stratum::data {

namespace jinja {
struct Template;
}

class ChatTemplate {
 public:
  // Parses the template. `name` names it in errors ("<name> line L, column
  // C: ..."). Throws jinja::TemplateError.
  explicit ChatTemplate(const std::string& text, const std::string& name = "chat template",
                        const jinja::RenderLimits& limits = {});

  // apply_chat_template(messages, add_generation_prompt=..., tokenize=False,
  // **variables): `messages` is a JSON array of message objects (a key whose
  // value is null is dropped, as transformers 5 does); `variables` a JSON
  // object of what else the template sees: bos_token, eos_token (transformers
  // passes the tokenizer's special tokens), tools (None when absent, as
  // transformers passes it), documents, date_string, custom keys. Key order
  // is kept (it shows in tojson). Throws jinja::TemplateError (and
  // jinja::TemplateRaised for the template's raise_exception), or
  // stratum::Error when messages is not a non-empty array of objects.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& variables) const;
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;

  const std::string& name() const;
  // The template's text as parsed (newlines normalized): what a cache of its
  // renders is keyed on.
  const std::string& text() const;

 private:
  std::string render_checked(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& variables) const;
  std::shared_ptr<const jinja::Template> template_;
  jinja::RenderLimits limits_;
};

}  // namespace stratum::data
