#pragma once
// A tokenizer from what --tokenizer names. Plain C++, no torch.
#include <memory>
#include <string>

#include "stratum/data/tokenizer.h"

namespace stratum::data {

// "byte": the ByteTokenizer. A path: a Hugging Face tokenizer.json (any
// *.json), a SentencePiece model (*.model), a model directory holding
// tokenizer.json (preferred) or tokenizer.model, else a Stratum BPE merges
// file. Throws stratum::Error naming the path when none of these loads.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

// The tokenizer file a Hugging Face model directory holds, or "" if none.
std::string tokenizer_file_in(const std::string& directory);

}  // namespace stratum::data
