"""Writes the chat-template fixtures the C++ tests compare against, with the
real `transformers` (apply_chat_template) and `tokenizers` packages.

  python3 -m venv /tmp/chatenv
  /tmp/chatenv/bin/pip install torch==2.13.0 transformers tokenizers jinja2
  /tmp/chatenv/bin/python tests/data/chat_templates/make_fixtures.py

Templates (*.jinja, see SOURCES.md): Llama-3.1 and Llama-3.2 Instruct, Qwen2.5
Instruct, Mistral-7B-Instruct v0.3.

llama3_chat/, qwen_chat/  tokenizer.json shaped as the model's (byte-level BPE;
    Llama-3's and Qwen2's pre-tokenizer regex; the model's special tokens as
    added tokens), trained by `tokenizers` on tests/data/tokenizers/text.txt
    with a small vocabulary; tokenizer_config.json with the model's bos/eos.
    Qwen2's NFC normalizer is left out (Stratum's tokenizer.json reader takes
    none; the texts here are NFC already).
cases.json  per chat case: the template, messages, add_generation_prompt, the
    variables passed (bos_token, eos_token, tools, date_string, ...), and what
    transformers gave: the text (or the error the template raised), the ids of
    apply_chat_template(tokenize=True) where the case names a tokenizer, and
    the assistant-only loss mask found by rendering prefixes (for each
    assistant message i, render(messages[:i], add_generation_prompt=True) must
    be a prefix of render(messages[:i+1]); a span boundary falls after the
    tokens that the encoding of the text before it shares with the encoding
    of the whole text). A case rendered without date_string has the date
    Llama-3.2's strftime_now("%d %b %Y") gave replaced by {{DATE}}. Then
    prompt-completion records (template null) with the ids and completion
    mask TRL's SFTTrainer makes of them.
"""
import datetime
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = os.path.join(HERE, "..", "tokenizers", "text.txt")

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
                   "<|eot_id|>", "<|python_tag|>"]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_ADDED = ["<tool_call>", "</tool_call>"]  # added, not special, in Qwen2.5's file


def train(regex, specials, added, vocab):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    text = open(TEXT, encoding="utf-8").read()
    tok.train_from_iterator([text], trainer)
    tok.add_special_tokens(specials)
    tok.add_tokens(added)
    return tok


def prepend_bos(tok, bos):
    """Llama-3's post-processor: <|begin_of_text|> before a text with special tokens."""
    bos_id = tok.token_to_id(bos)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A:0 {bos}:1 $B:1", special_tokens=[(bos, bos_id)])
    return tok


def save(tok, name, bos, eos):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos).save_pretrained(d)
    for extra in ["special_tokens_map.json", "chat_template.jinja"]:
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    return PreTrainedTokenizerFast.from_pretrained(d)


TOOLS = [
    {"type": "function", "function": {
        "name": "get_current_temperature", "description": "Get the current temperature at a location.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "The location, as \"City, Country\""},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]},
        "return": {"type": "number", "description": "The temperature, as a float."}}},
    {"type": "function", "function": {
        "name": "wettervorhersage", "description": "Vorhersage für morgen — in °C, ünïcödé 温度 🌡️",
        "parameters": {"type": "object", "properties": {"ort": {"type": "string"}, "tage": {"type": "integer"}},
                       "required": ["ort"]}}},
]

UNICODE = "Grüße aus Köln! 你好，世界。 Ελληνικά, עברית, العربية, हिन्दी 👩‍👩‍👧‍👦 🇯🇵 e\u0301 \u00a0nbsp\ttab"


def conversations():
    """(name, messages) pairs every template renders."""
    s = {"role": "system", "content": "You are a careful assistant.\nAnswer briefly."}
    u1 = {"role": "user", "content": "What is the capital of France?"}
    a1 = {"role": "assistant", "content": "Paris."}
    u2 = {"role": "user", "content": "And of Germany?"}
    a2 = {"role": "assistant", "content": "Berlin, since 1990."}
    return [
        ("user", [u1]),
        ("system_user", [s, u1]),
        ("user_assistant", [u1, a1]),
        ("system_user_assistant", [s, u1, a1]),
        ("multi_turn", [u1, a1, u2, a2]),
        ("system_multi_turn", [s, u1, a1, u2, a2]),
        ("multi_turn_open", [s, u1, a1, u2]),
        ("unicode", [{"role": "system", "content": "Réponds en français. " + UNICODE},
                     {"role": "user", "content": UNICODE}, {"role": "assistant", "content": "D'accord — " + UNICODE}]),
        ("empty_content", [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]),
        ("whitespace_content", [{"role": "system", "content": "  spaced system  \n"},
                                {"role": "user", "content": "\n\n  leading and trailing  \n\n"},
                                {"role": "assistant", "content": "   answer with spaces   "}]),
        ("special_token_text", [{"role": "user", "content": "Say <|eot_id|> or <|im_end|> or [INST] or </s> literally"},
                                {"role": "assistant", "content": "<|eot_id|> <|im_end|> [/INST] </s>"}]),
        ("long_multi_turn", [s] + [m for i in range(6) for m in (
            {"role": "user", "content": f"Question {i}: what is {i} + {i}? " + ("Why? " * i)},
            {"role": "assistant", "content": f"{i} + {i} = {2 * i}.\n\nSo the answer is {2 * i}."})]),
    ]


def tool_cases(template):
    """Tool-calling conversations in each template's own format."""
    out = []
    if template == "qwen2.5-instruct":
        call = {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_current_temperature",
                                              "arguments": {"location": "Paris, France", "unit": "celsius"}}},
            {"type": "function", "function": {"name": "wettervorhersage", "arguments": {"ort": "Köln", "tage": 2}}}]}
        out.append(("tools_open", [{"role": "user", "content": "Weather in Paris and Köln?"}], {"tools": TOOLS}))
        out.append(("tools_calls", [{"role": "system", "content": "Use tools."},
                                    {"role": "user", "content": "Weather in Paris and Köln?"}, call,
                                    {"role": "tool", "name": "get_current_temperature", "content": "{\"temperature\": 22.5}"},
                                    {"role": "tool", "name": "wettervorhersage", "content": "Sonnig, 18 °C"},
                                    {"role": "assistant", "content": "22.5 °C in Paris; sunny and 18 °C in Köln."}],
                    {"tools": TOOLS}))
        out.append(("tools_calls_with_text", [{"role": "user", "content": "Paris?"},
                                              {"role": "assistant", "content": "Let me check.", "tool_calls": [
                                                  {"function": {"name": "get_current_temperature",
                                                                "arguments": {"location": "Paris"}}}]},
                                              {"role": "tool", "content": "21"},
                                              {"role": "assistant", "content": "21 degrees."}], {"tools": TOOLS}))
    if template.startswith("llama-3"):
        call = {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_current_temperature",
                                              "arguments": {"location": "Paris, France"}}}]}
        out.append(("tools_in_user_message", [{"role": "system", "content": "You check the weather."},
                                              {"role": "user", "content": "Weather in Paris?"}], {"tools": TOOLS}))
        out.append(("tools_in_system", [{"role": "user", "content": "Weather in Paris?"}, call,
                                        {"role": "tool", "content": "{\"temperature\": 22.5, \"unit\": \"celsius\"}"},
                                        {"role": "assistant", "content": "It is 22.5 °C."}],
                    {"tools": TOOLS, "tools_in_user_message": False}))
        out.append(("tool_call_in_user_message", [{"role": "user", "content": "Weather in Paris?"}, call,
                                                  {"role": "ipython", "content": {"temperature": 22.5}},
                                                  {"role": "assistant", "content": "22.5 °C."}], {"tools": TOOLS}))
        if template == "llama-3.1-instruct":
            out.append(("builtin_tools", [{"role": "user", "content": "Search the news."},
                                          {"role": "assistant", "tool_calls": [{"function": {
                                              "name": "brave_search", "arguments": {"query": "news today"}}}]},
                                          {"role": "ipython", "content": "Nothing new."},
                                          {"role": "assistant", "content": "Nothing new today."}],
                        {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]}))
    if template == "mistral-7b-instruct-v0.3":
        out.append(("tools_calls", [{"role": "system", "content": "Use tools."},
                                    {"role": "user", "content": "Weather in Paris?"},
                                    {"role": "assistant", "tool_calls": [{"id": "weather01", "type": "function", "function": {
                                        "name": "get_current_temperature", "arguments": {"location": "Paris, France"}}}]},
                                    {"role": "tool", "tool_call_id": "weather01", "content": "22.5"},
                                    {"role": "assistant", "content": "22.5 °C."},
                                    {"role": "user", "content": "Thanks!"}], {"tools": TOOLS}))
        out.append(("tool_id_wrong_length", [{"role": "user", "content": "Paris?"},
                                             {"role": "assistant", "tool_calls": [{"id": "abc", "function": {
                                                 "name": "get_current_temperature", "arguments": {}}}]}], {}))
        out.append(("roles_not_alternating", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], {}))
    return out


TEMPLATES = {
    # template: (tokenizer, variables every case gets)
    "llama-3.1-instruct": ("llama3_chat", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "llama-3.2-instruct": ("llama3_chat", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                                           "date_string": "26 Jul 2024"}),
    "qwen2.5-instruct": ("qwen_chat", {"bos_token": None, "eos_token": "<|im_end|>"}),
    "mistral-7b-instruct-v0.3": (None, {"bos_token": "<s>", "eos_token": "</s>"}),
}


def assistant_mask(tok, template, messages, variables):
    """Loss mask over apply_chat_template's ids: 1 on assistant turns."""
    full = tok.apply_chat_template(messages, chat_template=template, tokenize=False, **variables)
    ids = tok(full, add_special_tokens=False)["input_ids"]
    mask = [0] * len(ids)

    def boundary(chars):
        prefix_ids = tok(full[:chars], add_special_tokens=False)["input_ids"]
        n = 0
        while n < len(prefix_ids) and n < len(ids) and prefix_ids[n] == ids[n]:
            n += 1
        return n

    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = tok.apply_chat_template(messages[:i], chat_template=template, tokenize=False,
                                         add_generation_prompt=True, **variables) if i > 0 else ""
        upto = tok.apply_chat_template(messages[:i + 1], chat_template=template, tokenize=False, **variables)
        assert full.startswith(upto) and upto.startswith(before), (i, before, upto)
        for k in range(boundary(len(before)), boundary(len(upto))):
            mask[k] = 1
    return mask


def prompt_completion_cases(tokenizers):
    """TRL's SFTTrainer on {"prompt", "completion"} text: eos_token appended to the completion unless it ends
    with it, prompt + completion tokenized with special tokens, the loss on all but len(tokenizer(prompt))."""
    pairs = [("What is 2 + 2?", " 4"), ("Translate 'chat' to English:", " cat"), ("", "An empty prompt."),
             ("Ünïcödé prompt 你好 👋", " — answer ✓"), ("Already ends", " with EOS<|eot_id|>"),
             ("Line one\nLine two\n", "\tindented\n  completion  "), ("A prompt with no completion", "")]
    out = []
    for tok_name, tok in tokenizers.items():
        for prompt, completion in pairs:
            text = completion if completion.endswith(tok.eos_token) else completion + tok.eos_token
            ids = tok(prompt + text)["input_ids"]
            prompt_ids = tok(prompt)["input_ids"]
            mask = [0] * len(prompt_ids) + [1] * (len(ids) - len(prompt_ids))
            out.append({"template": None, "name": "prompt_completion", "tokenizer": tok_name,
                        "record": {"prompt": prompt, "completion": completion}, "ids": ids, "loss_mask": mask})
    return out


def main():
    tokenizers = {
        "llama3_chat": save(prepend_bos(train(LLAMA3_REGEX, LLAMA3_SPECIALS, [], 1200), "<|begin_of_text|>"),
                            "llama3_chat", "<|begin_of_text|>", "<|eot_id|>"),
        "qwen_chat": save(train(QWEN2_REGEX, QWEN_SPECIALS, QWEN_ADDED, 1200), "qwen_chat", None, "<|im_end|>"),
    }
    plain = tokenizers["llama3_chat"]  # renders the templates that have no tokenizer here (text only)
    cases = []
    for name, (tok_name, base_vars) in TEMPLATES.items():
        template = open(os.path.join(HERE, name + ".jinja"), encoding="utf-8").read()
        tok = tokenizers.get(tok_name, plain)
        runs = [(n, m, {}) for n, m in conversations()] + tool_cases(name)
        if name == "llama-3.2-instruct":
            runs.append(("today", conversations()[1][1], {"date_string": None}))
        for case_name, messages, extra in runs:
            variables = {k: v for k, v in {**base_vars, **extra}.items() if v is not None}
            for agp in (False, True):
                case = {"template": name, "name": case_name, "messages": messages, "add_generation_prompt": agp,
                        "variables": variables}
                try:
                    text = tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                                   add_generation_prompt=agp, **variables)
                except Exception as e:  # the template's raise_exception
                    case["error"] = str(e)
                    cases.append(case)
                    continue
                if "date_string" not in variables and name == "llama-3.2-instruct":
                    today = datetime.datetime.now().strftime("%d %b %Y")
                    assert today in text
                    text = text.replace(today, "{{DATE}}")
                    case["date_dependent"] = True
                case["text"] = text
                if tok_name and not case.get("date_dependent"):
                    case["tokenizer"] = tok_name
                    ids = tok.apply_chat_template(messages, chat_template=template, tokenize=True,
                                                  add_generation_prompt=agp, **variables)
                    if isinstance(ids, dict) or hasattr(ids, "keys"):
                        ids = ids["input_ids"]
                    assert ids == tok(text, add_special_tokens=False)["input_ids"]
                    case["ids"] = ids
                    if not agp and messages[-1]["role"] == "assistant":
                        case["loss_mask"] = assistant_mask(tok, template, messages, variables)
                cases.append(case)
    cases += prompt_completion_cases(tokenizers)
    with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases, {sum('ids' in c for c in cases)} with ids, "
          f"{sum('loss_mask' in c for c in cases)} with loss masks, {sum('error' in c for c in cases)} errors")


if __name__ == "__main__":
    sys.exit(main())
