# The fuzz targets, one list for the fuzz build (fuzz/CMakeLists.txt) and the
# CTest cases (cmake/StratumFuzz.cmake). A target NAME is fuzz/fuzz_NAME.cpp
# with seeds in fuzz/corpus/NAME/; adding one is adding its name here (and any
# new torch-free source it needs to STRATUM_FUZZ_SOURCES).
set(STRATUM_FUZZ_TARGETS config hostfile safetensors_header token_file checkpoint_manifest
  tokenizer_json tokenizer_config sentencepiece_model hf_config safetensors_index jsonl_record
  megatron_index llmc_header slurm_hostlist chat_template document_index)

# The torch-free sources the targets link, relative to src/stratum (libtorch
# cannot be linked with ASan here, so nothing here may include torch).
set(STRATUM_FUZZ_SOURCES
  core/error.cpp core/fs.cpp core/json_depth.cpp core/json_file.cpp core/shorten.cpp core/crc32c.cpp
  io/safetensors_header.cpp io/safetensors_index.cpp
  config/json_source.cpp config/partition_pattern.cpp config/key_reader.cpp config/parse_training.cpp config/parse_zero.cpp
  config/parse_parallel.cpp config/parse_diagnostics.cpp config/parse_flops_profiler.cpp config/parse_lora.cpp config/parse_moe.cpp config/parse_fp8.cpp config/validate.cpp config/config.cpp
  config/batch.cpp config/to_json.cpp
  distributed/launch/hostfile.cpp distributed/launch/resources.cpp distributed/launch/process.cpp
  data/token_file.cpp data/jsonl_record.cpp data/foreign_token_headers.cpp
  checkpoint/tags.cpp checkpoint/manifest.cpp
  distributed/launch/slurm_hostlist.cpp
  data/tokenizer.cpp data/hf_tokenizer.cpp data/hf_tokenizer_file.cpp data/json_node.cpp data/bounded_regex.cpp
  data/byte_level_bpe.cpp data/sentencepiece_tokenizer.cpp data/sentencepiece_model_check.cpp
  models/model_config.cpp models/hf_config.cpp
  data/jinja/text.cpp data/jinja/error.cpp data/jinja/value.cpp data/jinja/lexer.cpp data/jinja/parser.cpp
  data/jinja/access.cpp data/jinja/filters.cpp data/jinja/render.cpp data/chat_template.cpp)
