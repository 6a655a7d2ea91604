#include "stratum/data/chat_template.h"

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/data/jinja/parser.h"
#include "stratum/data/jinja/render.h"

namespace stratum::data {

ChatTemplate::ChatTemplate(const std::string& text, const std::string& name, const jinja::RenderLimits& limits)
    : template_(jinja::parse_template(text, name)), limits_(limits) {}

const std::string& ChatTemplate::name() const { return template_->source.name; }
const std::string& ChatTemplate::text() const { return template_->source.text; }

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
  return render(messages, add_generation_prompt, nlohmann::ordered_json::object());
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& variables) const {
  if (!messages.is_array()) throw Error(name() + ": the messages are not a JSON array");
  if (messages.empty()) throw Error(name() + ": cannot apply a chat template to an empty conversation");
  if (!variables.is_object()) throw Error(name() + ": the template variables are not a JSON object");
  try {
    return render_checked(messages, add_generation_prompt, variables);
  } catch (const jinja::ValueError& e) {  // a value nested too deep while converting
    throw jinja::TemplateError(name() + ": " + e.what());
  }
}

std::string ChatTemplate::render_checked(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                         const nlohmann::ordered_json& variables) const {
  jinja::List chat;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object()) throw Error(name() + ": message " + std::to_string(i) + " is not a JSON object");
    nlohmann::ordered_json kept = nlohmann::ordered_json::object();
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!it.value().is_null()) kept[it.key()] = it.value();  // transformers 5 drops None values
    chat.push_back(jinja::from_json(kept));
  }
  // What transformers' render() passes, in its order; the variables (its
  // template_kwargs) after.
  jinja::Dict vars;
  vars.set(jinja::Value("messages"), jinja::Value::list(std::move(chat)));
  vars.set(jinja::Value("tools"), jinja::Value::none());
  vars.set(jinja::Value("documents"), jinja::Value::none());
  vars.set(jinja::Value("add_generation_prompt"), jinja::Value(add_generation_prompt));
  for (auto it = variables.begin(); it != variables.end(); ++it) {
    if (it.key() == "messages" || it.key() == "add_generation_prompt")
      throw Error(name() + ": '" + it.key() + "' is not a template variable one may set");
    vars.set(jinja::Value(it.key()), jinja::from_json(it.value()));
  }
  return jinja::render(*template_, vars, limits_);
}

}  // namespace stratum::data
