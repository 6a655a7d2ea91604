// Chat templates against transformers' apply_chat_template (fixtures made by
// tests/data/chat_templates/make_fixtures.py with transformers 5 and jinja2
// 3.1): the text of every case for the real templates of Llama-3.1/3.2
// Instruct, Qwen2.5 Instruct and Mistral-7B-Instruct v0.3, the ids
// apply_chat_template(tokenize=True) gives with small tokenizers shaped as
// the models', the errors the templates raise; then the Jinja subset's own
// semantics and its limits on untrusted templates.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/data/chat_template.h"
#include "stratum/data/jinja/error.h"
#include "stratum/data/load_tokenizer.h"

#include "chat_fixtures.h"

namespace stratum::data {
namespace {

using json = nlohmann::ordered_json;

const std::string& kDir = test::kChatDir;
using test::slurp;

const json& cases() { return test::chat_cases(); }

const ChatTemplate& template_named(const std::string& name) {
  static std::map<std::string, std::unique_ptr<ChatTemplate>> loaded;
  auto& t = loaded[name];
  if (!t) t = std::make_unique<ChatTemplate>(slurp(kDir + "/" + name + ".jinja"), name + ".jinja");
  return *t;
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[64];
  std::strftime(buf, sizeof buf, "%d %b %Y", &local);
  return buf;
}

std::string case_name(const json& c) {
  return c["template"].get<std::string>() + "/" + c["name"].get<std::string>() +
         (c["add_generation_prompt"].get<bool>() ? " (generation prompt)" : "");
}

// Text, raised errors and ids of every case of one template.
void expect_template_matches(const std::string& template_name, int* texts, int* ids) {
  for (const json& c : cases()) {
    if (c["template"] != template_name) continue;
    SCOPED_TRACE(case_name(c));
    const ChatTemplate& t = template_named(template_name);
    if (c.contains("error")) {
      try {
        t.render(c["messages"], c["add_generation_prompt"].get<bool>(), c["variables"]);
        ADD_FAILURE() << "rendered, but transformers raised: " << c["error"];
      } catch (const jinja::TemplateRaised& e) {
        EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos) << e.what();
      }
      ++*texts;
      continue;
    }
    std::string expected = c["text"].get<std::string>();
    if (c.value("date_dependent", false)) expected.replace(expected.find("{{DATE}}"), 8, today());
    const std::string text = t.render(c["messages"], c["add_generation_prompt"].get<bool>(), c["variables"]);
    EXPECT_EQ(text, expected);
    ++*texts;
    if (!c.contains("ids")) continue;
    static std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers;
    auto& tok = tokenizers[c["tokenizer"].get<std::string>()];
    if (!tok) tok = load_tokenizer(kDir + "/" + c["tokenizer"].get<std::string>());
    EXPECT_EQ(tok->encode(text), c["ids"].get<std::vector<int32_t>>());  // tokenize=True adds no special tokens
    ++*ids;
  }
}

TEST(ChatTemplate, Llama31MatchesTransformersTextAndIds) {
  int texts = 0, ids = 0;
  expect_template_matches("llama-3.1-instruct", &texts, &ids);
  EXPECT_EQ(texts, 32);
  EXPECT_EQ(ids, 32);
}

TEST(ChatTemplate, Llama32MatchesTransformersTextAndIds) {
  int texts = 0, ids = 0;
  expect_template_matches("llama-3.2-instruct", &texts, &ids);
  EXPECT_EQ(texts, 32);  // two rendered with today's date from strftime_now
  EXPECT_EQ(ids, 30);
}

TEST(ChatTemplate, Qwen25MatchesTransformersTextAndIds) {
  int texts = 0, ids = 0;
  expect_template_matches("qwen2.5-instruct", &texts, &ids);
  EXPECT_EQ(texts, 30);
  EXPECT_EQ(ids, 30);
}

TEST(ChatTemplate, Mistral7BV03MatchesTransformersTextAndRaisedErrors) {
  int texts = 0, ids = 0;
  expect_template_matches("mistral-7b-instruct-v0.3", &texts, &ids);
  EXPECT_EQ(texts, 30);
}

// --- the Jinja subset on its own ------------------------------------------------

std::string render(const std::string& text, const json& variables = json::object()) {
  return ChatTemplate(text, "t").render(json::array({json::object()}), false, variables);
}

TEST(ChatTemplate, JinjaSemanticsMatchJinja2) {
  // Each expected value is what jinja2 3.1.6 renders under transformers' settings.
  EXPECT_EQ(render("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{% endfor %}{{ x }}"), "0000");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "3");
  EXPECT_EQ(render("{{ [1,2] }}{{ (1,2) }}{{ {'a': None, 'b': True, 'c': 1.5} }}"), "[1, 2][1, 2]{'a': None, 'b': True, 'c': 1.5}");
  EXPECT_EQ(render("{{ 'it''s' }}|{{ \"a'b\" }}|{{ ['a\\'b', 'x\"y'] }}"), "its|a'b|[\"a'b\", 'x\"y']");
  EXPECT_EQ(render("{{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} "
                   "{{ 0.0001 }} {{ 0.00001 }} {{ 3.0 }} {{ 0.1+0.2 }}"),
            "0.5 2.0 3 -4 2 1024 1e+20 1e+16 1000000000000000.0 0.0001 1e-05 3.0 0.30000000000000004");
  EXPECT_EQ(render("{{ 'abc'[1:] }}{{ 'héllo'[1] }}{{ 'héllo'|length }}{{ 'abc'[::-1] }}{{ [1,2,3,4][1:3] }}"), "bcé5cba[2, 3]");
  EXPECT_EQ(render("{{ [1,2,3][5] }}|{{ {'a':1}['b'] }}|{{ none.y }}|"), "|||");
  EXPECT_EQ(render("{{ 1 == 1.0 }}{{ True == 1 }}{{ {'a':1,'b':2} == {'b':2,'a':1} }}"), "TrueTrueTrue");
  EXPECT_EQ(render("{{ 'a' ~ none ~ x ~ true }}"), "aNoneTrue");
  EXPECT_EQ(render("{{ x is defined }}{{ none is none }}{{ 'a' is iterable }}{{ {} is mapping }}{{ true is number }}"
                   "{{ true is integer }}"),
            "FalseTrueTrueTrueTrueFalse");
  EXPECT_EQ(render("{% for a in 'héllo' %}{{ a }},{% endfor %}"), "h,é,l,l,o,");
  EXPECT_EQ(render("{{ x | trim }}|{{ x | length }}"), "|0");
  EXPECT_EQ(render("{{ 'a b  c '.split() }}{{ 'a,b'.split(',') }}{{ '  x '.strip() }}{{ 'xxa'.lstrip('x') }}"),
            "['a', 'b', 'c']['a', 'b']xa");
  EXPECT_EQ(render("{{ 'a b  c '.split(none, 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ 'abc'.replace('', '-') }}"
                   "{{ ' a b c '.rsplit(none, 1) }}"),
            "['a', 'b  c ']['a,b', 'c']-a-b-c-[' a b', 'c']");
  EXPECT_EQ(render("{% for x in [1,2,3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "13");
  EXPECT_EQ(render("{% for x in [1,2,3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "1");
  EXPECT_EQ(render("{{ [1,2,3] | tojson }}|{{ {'a': 'é\\n'} | tojson }}|{{ {'a': [1, {}], 'b': []} | tojson(indent=2) }}"),
            "[1, 2, 3]|{\"a\": \"é\\n\"}|{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
  EXPECT_EQ(render("{{ 'x' * 3 }}{{ [1] + [2] }}{{ 'ab' in 'xabx' }}{{ 1 in [1] }}{{ 'a' in {'a':1} }}{{ 2 not in [1] }}"),
            "xxx[1, 2]TrueTrueTrueTrue");
  EXPECT_EQ(render("{% macro m(a, b='x') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}"), "[1x][12]");
  EXPECT_EQ(render("{{ [3,1,2]|sort|list }}{{ ['a','b']|join(',') }}{{ [1,2]|first }}{{ 'abc'|last }}{{ 'abc'|upper }}"),
            "[1, 2, 3]a,b1cABC");
  EXPECT_EQ(render("{{ 1.5|int }}{{ '3'|int }}{{ 'x'|int }}{{ 2|float }}"), "1302.0");
  EXPECT_EQ(render("{{ x|default('d') }}{{ none|default('d') }}{{ none|default('d', true) }}"), "dNoned");
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\n  y"), "  x\n  y");
  EXPECT_EQ(render("{{ 'a' }}\n{# c #}\nb"), "a\nb");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("{%+ if true %}x{% endif %}|  {%+ if true %}y{% endif %}"), "x|  y");
  EXPECT_EQ(render("{% raw %}{{ not rendered }}{% endraw %}"), "{{ not rendered }}");
  EXPECT_EQ(render("{{ 1 if false }}|{{ [] or 'e' }}|{{ 0 and 1 }}|{{ 'y' if true else 'n' }}"), "|e|0|y");
  EXPECT_EQ(render("{{ {'é': '\\u00a0x'} }}{{ ['\\t', '\\x7f', '\\u200b'] }}"), "{'é': '\\xa0x'}['\\t', '\\x7f', '\\u200b']");
  EXPECT_EQ(render("{{ 'é\\u00e9\\x41\\101\\q' }}"), "ééAA\\q");
  EXPECT_EQ(render("{{ 'hello'.title() }}{{ 'hello'.startswith(('he','x')) }}{{ 'a\\nb'.splitlines() }}"),
            "HelloTrue['a', 'b']");
  EXPECT_EQ(render("{% set d = {'b': 1, 'a': 2} %}{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}"
                   "{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}"),
            "b1a2a2b1");
  EXPECT_EQ(render("{{ [{'r': 'u'}, {'r': 'a'}, {'r': 'u'}] | selectattr('r', 'equalto', 'u') | list | length }}"
                   "{{ ['a', 'b'] | map('upper') | join }}{{ [{'n': 1}, {'n': 3}] | map(attribute='n') | sum }}"),
            "2AB4");
  EXPECT_EQ(render("{% for x in [1, 2, 3] if x != 2 %}{{ loop.index }}{{ x }}{{ loop.length }}{% endfor %}"), "112232");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% set s %}in {{ 1 + 1 }}{% endset %}[{{ s }}]{% filter upper %}up{% endfilter %}"), "[in 2]UP");
  EXPECT_EQ(render("{{ 'x' | indent(2) }}|{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}"), "x|a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(render("{{ bos_token ~ messages | length }}", {{"bos_token", "<s>"}}), "<s>1");
  EXPECT_EQ(render("{{ 'a' < 'b' }}{{ [1,2] < [1,3] }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}"), "TrueTrueTrueFalse");
}

TEST(ChatTemplate, StrftimeNowIsTodayInLocalTime) {
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}"), today());
}

// --- untrusted templates: errors name the line and column ---------------------

std::string error_of(const std::string& text, const json& variables = json::object()) {
  try {
    render(text, variables);
  } catch (const Error& e) {
    return e.what();
  }
  return "(rendered)";
}

TEST(ChatTemplate, ErrorsNameTheTemplateLineAndColumn) {
  EXPECT_EQ(error_of("line one\n{{ 'unterminated }}"), "t line 2, column 4: unterminated string literal");
  EXPECT_EQ(error_of("{% if x %}\nno end"), "t line 1, column 4: this block is never closed: the template ends before "
                                                  "'elif' or 'else' or 'endif'");
  EXPECT_EQ(error_of("{{ x | nosuchfilter }}"), "t line 1, column 8: no filter named 'nosuchfilter'");
  EXPECT_EQ(error_of("{% include 'x' %}"), "t line 1, column 4: the 'include' tag is not supported in chat templates");
  EXPECT_EQ(error_of("{% endfor %}"), "t line 1, column 4: unexpected 'endfor': no open block it could end");
  EXPECT_EQ(error_of("{% break %}"), "t line 1, column 4: 'break' outside a loop");
  EXPECT_EQ(error_of("\n  {{ undefined_thing + 'x' }}"), "t line 2, column 22: 'undefined_thing' is undefined");
  EXPECT_EQ(error_of("{{ 1 < 'a' }}"), "t line 1, column 6: '<' not supported between instances of 'int' and 'str'");
  EXPECT_EQ(error_of("{{ messages[0].x.y }}"), "t line 1, column 17: 'dict object' has no attribute 'x'");
  EXPECT_EQ(error_of("{{ raise_exception('Roles must alternate!') }}"), "t line 1, column 19: Roles must alternate!");
  EXPECT_EQ(error_of("{{ [1, 2][::-1, 2] }}"), "t line 1, column 11: a slice among several subscripts is not supported");
  EXPECT_EQ(error_of("{{ (((((1 }}"), "t line 1, column 11: unexpected '}', expected ')'");
  EXPECT_EQ(error_of("{{ 9223372036854775807 + 1 }}"), "t line 1, column 24: integer overflow: the result needs more than 64 bits");
  EXPECT_EQ(error_of("{{ {} | tojson }}{{ x | tojson }}"), "t line 1, column 23: Object of type Undefined is not JSON serializable");
}

TEST(ChatTemplate, UntrustedTemplatesHitLimitsNotTheStack) {
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nested deeper than"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(100000000) %}{% endfor %}").find("a sequence of 100000000 items"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}").find("beyond the limit"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("beyond the limit"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("macro calls nest deeper than 64"),
            std::string::npos);
  jinja::RenderLimits small;
  small.max_work = 100'000;
  const ChatTemplate busy("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "t", small);
  try {
    busy.render(json::array({json::object()}), false);
    ADD_FAILURE() << "rendered a million iterations under a budget of 100000";
  } catch (const jinja::TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 100000 steps of work"), std::string::npos) << e.what();
  }
  small.max_output_bytes = 100;
  const ChatTemplate t("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", "t", small);
  EXPECT_THROW(t.render(json::array({json::object()}), false), jinja::TemplateError);
}

TEST(ChatTemplate, MessagesMustBeANonEmptyArrayOfObjects) {
  const ChatTemplate t("{{ messages }}", "t");
  EXPECT_THROW(t.render(json::array(), false), Error);
  EXPECT_THROW(t.render(json::object(), false), Error);
  EXPECT_THROW(t.render(json::array({1}), false), Error);
  // transformers 5 drops keys whose value is null.
  EXPECT_EQ(t.render(json::parse(R"([{"role": "assistant", "content": null, "x": 1}])"), false),
            "[{'role': 'assistant', 'x': 1}]");
}

}  // namespace
}  // namespace stratum::data
