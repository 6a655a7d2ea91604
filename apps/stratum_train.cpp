// stratum-train: trains a built-in GPT-2 / LLaMA model on a text or token file
// with the engine, under stratum-run (or mpirun, or alone); or fine-tunes one
// from a Hugging Face model directory (--init-from), on text or on
// instruction data (chat or prompt-completion JSON Lines, packed).
//
//   stratum-run --num_gpus 2 stratum-train --config ds_config.json --model gpt2-124m --data corpus.txt
//   stratum-run --num_gpus 8 stratum-train --config ds_config.json --init-from ./Llama-3.2-1B --data corpus.txt
//   stratum-run stratum-train --config qlora.json --init-from ./Llama-3.2-1B-Instruct --data chat:conversations.jsonl
//
// Shows a progress line (terminal) or plain lines (logs), writes metrics
// (csv_monitor or --log-dir; TensorBoard events with the tensorboard section;
// summary.json and loss_curve.svg at the end), evaluates on held-out data,
// saves checkpoints that --resume continues exactly, and prints a sample of
// generated text at the end; every layout through one engine and one loop.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <optional>
#include <thread>
#include <tuple>

#include "stratum/checkpoint/checkpoint.h"
#include "stratum/checkpoint/engine_checkpoint.h"
#include "stratum/checkpoint/load_weights.h"
#include "stratum/checkpoint/manifest.h"
#include "stratum/checkpoint/peft_adapter.h"
#include "stratum/core/fs.h"
#include "stratum/core/log.h"
#include "stratum/data/blend.h"
#include "stratum/data/chat_format_file.h"
#include "stratum/data/dataset.h"
#include "stratum/data/default_corpus.h"
#include "stratum/data/instruction_data.h"
#include "stratum/data/load_tokenizer.h"
#include "stratum/data/sampler.h"
#include "stratum/data/tokenizer.h"
#include "stratum/data/training_source.h"
#include "stratum/distributed/agreement.h"
#include "stratum/distributed/job.h"
#include "stratum/distributed/parallel_groups.h"
#include "stratum/distributed/process_grid.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/out_of_memory.h"
#include "stratum/engine/tensor_parallel_setup.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/flops.h"
#include "stratum/models/generate.h"
#include "stratum/models/hf_config.h"
#include "stratum/models/hf_state_dict.h"
#include "stratum/models/lora.h"
#include "stratum/models/model_config.h"
#include "stratum/models/tensor_parallel_plan.h"
#include "stratum/engine/moe_routing.h"
#include "stratum/models/moe_config.h"
#include "stratum/monitor/progress.h"
#include "stratum/nn/lora_linear.h"
#include "stratum/monitor/run_records.h"
#include "stratum/monitor/straggler.h"
#ifdef STRATUM_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

using namespace stratum;
using nlohmann::json;

namespace {

struct Options {
  std::string config_path, model = "gpt2-tiny-bytes", cache_dir = ".stratum-cache";
  std::vector<std::string> data = {"default"};  // one source, or Megatron's "W1 P1 W2 P2 ..." blend
  std::string tokenizer;  // --tokenizer; empty: the --init-from directory's, else bytes
  std::string chat_template;  // --chat-template: a Jinja file instead of the tokenizer's template
  std::string init_from;  // a Hugging Face model directory: its shape and weights instead of a preset's
  std::string lora_from;  // a peft adapter directory: the adapters' starting values
  std::vector<std::string> overrides;
  int64_t steps = 300, eval_every = 100, eval_batches = 4, save_every = 0, print_every = 0;
  std::string save_dir, log_dir, resume_tag;
  bool resume = false;
  uint64_t seed = 1234;
  int64_t sample_tokens = 200;
  std::string prompt = "The ";
  double temperature = 0.8, eval_fraction = 0.05, peak_tflops = 989.0;
  int64_t top_k = 40;
  // Token windows over documents (data/training_source.h): --documents,
  // --document-positions, --cross-document-targets.
  std::string documents = "joined", document_positions = "restart", cross_document_targets = "keep";
};

data::DocumentWindows document_windows(const Options& o) {
  return {o.documents == "separate", o.document_positions == "restart", o.cross_document_targets == "mask"};
}

double memory_gib(const distributed::DistContext& ctx) {
#ifdef STRATUM_WITH_CUDA
  if (ctx.cuda_device >= 0)
    return c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(ctx.cuda_device))
               .allocated_bytes[0].peak / double(1 << 30);
#endif
  (void)ctx;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / (1024.0 * 1024.0);  // kB
  return 0.0;
}

// The largest of every rank's `mine` and the rank holding it (collective
// over the job's CPU ranks; no rank on a job of one), and the smallest.
struct RankExtremes {
  double largest = 0, smallest = 0;
  std::optional<int> rank;
};
RankExtremes rank_extremes(const distributed::DistContext& ctx, double mine) {
  if (ctx.world_size == 1) return {mine, mine, std::nullopt};
  at::Tensor all = at::empty({ctx.world_size}, at::kDouble);
  at::Tensor one = at::full({1}, mine, at::kDouble);
  ctx.cpu_world->all_gather(all, one)->wait();
  const int64_t rank = all.argmax().item<int64_t>();
  return {all[rank].item<double>(), all.min().item<double>(), static_cast<int>(rank)};
}
// Every step's figures from every rank, in the one gather a step makes: the
// memory column's largest rank, and each rank's own work (its step time less
// its waits for collectives) with its pipeline stage for the straggler check.
struct StepFigures {
  double largest_memory = 0;
  std::optional<int> memory_rank;
  std::vector<double> busy;  // by rank
  std::vector<int> stage;    // by rank
};
StepFigures gather_step_figures(const distributed::DistContext& ctx, double busy, int stage) {
  StepFigures f;
  const double memory = memory_gib(ctx);
  if (ctx.world_size == 1) {
    f.largest_memory = memory;
    return f;
  }
  constexpr int kWords = 3;
  at::Tensor all = at::empty({ctx.world_size * kWords}, at::kDouble);
  at::Tensor mine = at::tensor({memory, busy, static_cast<double>(stage)}, at::kDouble);
  ctx.cpu_world->all_gather(all, mine)->wait();
  const double* p = all.data_ptr<double>();
  for (int r = 0; r < ctx.world_size; ++r) {
    if (!f.memory_rank || p[r * kWords] > f.largest_memory) {
      f.largest_memory = p[r * kWords];
      f.memory_rank = r;
    }
    f.busy.push_back(p[r * kWords + 1]);
    f.stage.push_back(static_cast<int>(p[r * kWords + 2]));
  }
  return f;
}

// STRATUM_STRAGGLER_FAULT="<rank>:<seconds>" (tests): that rank sleeps this
// long in every step, as a slow GPU or a noisy neighbour would slow it.
double straggler_fault_seconds(int rank) {
  const char* v = std::getenv("STRATUM_STRAGGLER_FAULT");
  if (!v || !*v) return 0;
  const std::string text = v;
  const auto colon = text.find(':');
  char* end = nullptr;
  const long r = colon == std::string::npos ? -1 : std::strtol(text.c_str(), &end, 10);
  const double seconds = colon == std::string::npos ? -1 : std::strtod(text.c_str() + colon + 1, &end);
  if (colon == std::string::npos || r < 0 || !(seconds >= 0) || *end != '\0')
    throw Error("STRATUM_STRAGGLER_FAULT='" + text + "': expected <rank>:<seconds>");
  return r == rank ? seconds : 0;
}

// The process's resident high-water mark (VmHWM) in GiB: on a GPU run, the
// host memory the offloaded optimizer, pinned buffers and host checkpoints took.
double resident_high_water_gib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / (1024.0 * 1024.0);  // kB
  return 0.0;
}

// The start-up peak, once the engine holds the model: the GPU allocator's
// peak, or on CPU ranks the process's resident high-water mark (VmHWM), the
// largest rank's and the smallest; then the GPU's peak starts afresh, so the
// memory column shows training.
void report_startup_peak(const distributed::DistContext& ctx, bool lead) {
  double mine = 0;
#ifdef STRATUM_WITH_CUDA
  if (ctx.cuda_device >= 0) mine = memory_gib(ctx);
#endif
  if (ctx.cuda_device < 0) mine = resident_high_water_gib();
  const RankExtremes e = rank_extremes(ctx, mine);
  char text[200];
  if (e.rank)
    std::snprintf(text, sizeof text, "start-up peak memory %.3f GiB (rank %d; the smallest rank's %.3f GiB)", e.largest,
                  *e.rank, e.smallest);
  else
    std::snprintf(text, sizeof text, "start-up peak memory %.3f GiB", e.largest);
  if (lead) log::info(std::string(text) + (ctx.cuda_device >= 0 ? "" : ", resident high-water mark"));
#ifdef STRATUM_WITH_CUDA
  if (ctx.cuda_device >= 0)
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(ctx.cuda_device));
#endif
}

// The dataset on every rank: local rank 0 tokenizes (and writes the default
// corpus) while the others wait, then everyone maps the same file.
data::TokenFile open_dataset(const Options& o, const distributed::DistContext& ctx, const data::Tokenizer& tokenizer,
                             int64_t seq) {
  std::vector<data::BlendSource> sources;
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "reading --data", [&] { sources = data::parse_blend(o.data); });
  auto source_path = [&](const std::string& p) { return p == "default" ? o.cache_dir + "/default_corpus.txt" : p; };
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "data preparation", [&] {
    if (ctx.local_rank != 0) return;
    std::vector<data::BlendSource> files;
    for (const auto& s : sources) {
      if (s.path == "default") data::write_default_corpus(o.cache_dir);
      files.push_back({s.weight, data::prepare_token_file(source_path(s.path), tokenizer, {o.cache_dir, true})});
    }
    data::blend_token_files(files, seq, o.cache_dir, /*may_write=*/true);
  });
  std::optional<data::TokenFile> file;
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "opening the data", [&] {
    std::vector<data::BlendSource> files;
    for (const auto& s : sources)
      files.push_back({s.weight, data::prepare_token_file(source_path(s.path), tokenizer, {o.cache_dir, false})});
    file.emplace(data::blend_token_files(files, seq, o.cache_dir, /*may_write=*/false));
  });
  return std::move(*file);
}

// Instruction data: --data chat:FILE or prompt-completion:FILE (one file).
struct InstructionSpec {
  data::InstructionForm form = data::InstructionForm::any;
  std::string path;
};
std::optional<InstructionSpec> instruction_spec(const Options& o) {
  for (const auto& [prefix, form] : {std::pair{std::string("chat:"), data::InstructionForm::chat},
                                     std::pair{std::string("prompt-completion:"), data::InstructionForm::prompt_completion}})
    for (const std::string& d : o.data)
      if (d.rfind(prefix, 0) == 0) {
        if (o.data.size() != 1)
          throw Error("--data " + d + ": instruction data is one file alone, not part of a blend");
        if (d.size() == prefix.size()) throw Error("--data " + d + ": name the JSON Lines file after '" + prefix + "'");
        return InstructionSpec{form, d.substr(prefix.size())};
      }
  return std::nullopt;
}

// --tokenizer, else the tokenizer of the --init-from directory, else bytes.
std::string tokenizer_spec(const Options& o) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  if (!o.init_from.empty() && !data::tokenizer_file_in(o.init_from).empty()) return data::tokenizer_file_in(o.init_from);
  return "byte";
}

// The chat format conversations are rendered with: the tokenizer directory's
// tokenizer_config.json (its chat_template, or chat_template.jinja beside it,
// and its special tokens), the template replaced by --chat-template.
data::ChatFormat chat_format(const Options& o) {
  const std::string spec = tokenizer_spec(o);
  std::string dir = spec == "byte" ? "" : spec;
  if (!dir.empty() && !fs::is_directory(dir)) dir = dir.rfind('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
  const std::string config = dir.empty() || !fs::is_regular_file(dir + "/tokenizer_config.json")
                                 ? std::string()
                                 : dir + "/tokenizer_config.json";
  if (config.empty() && o.chat_template.empty())
    throw Error("chat data needs a chat template: the tokenizer (" + spec + ") has no tokenizer_config.json beside it; "
                "give one with --chat-template FILE.jinja");
  return data::load_chat_format(config, o.chat_template);
}

// What the run trains and evaluates on, checked against the model (its token
// ids fit the vocabulary, a sequence fits): local rank 0 tokenizes while the
// others wait, then every rank maps the same file.
std::unique_ptr<data::TrainingSource> open_training_source(const Options& o, const distributed::DistContext& ctx,
                                                           const data::Tokenizer& tokenizer,
                                                           const models::ModelConfig& mcfg,
                                                           const data::TrainingSourceOptions& options) {
  std::optional<InstructionSpec> instruction;
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "reading --data", [&] {
    instruction = instruction_spec(o);
    if (!o.chat_template.empty() && (!instruction || instruction->form != data::InstructionForm::chat))
      throw Error("--chat-template " + o.chat_template + ": only chat:FILE data is rendered with a chat template");
  });
  std::unique_ptr<data::TrainingSource> source;
  if (!instruction) {
    data::TokenFile file = open_dataset(o, ctx, tokenizer, mcfg.max_seq_len);
    distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "checking the data", [&] {
      if (file.vocab_size() > mcfg.vocab_size)
        throw Error(file.path() + ": token ids reach " + std::to_string(file.vocab_size()) + " but model " + mcfg.name +
                    " has a vocabulary of " + std::to_string(mcfg.vocab_size));
      file.require_sequence(mcfg.max_seq_len);
      source = data::token_window_source(std::move(file), options);
    });
    return source;
  }
  std::optional<data::ChatFormat> chat;
  data::InstructionDataOptions prepare{o.cache_dir, ctx.local_rank == 0, data::kMaxJsonlLineBytes, instruction->form};
  data::InstructionStats stats;
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "preparing --data " + instruction->path, [&] {
    if (instruction->form == data::InstructionForm::chat) chat = chat_format(o);
    if (ctx.local_rank == 0)
      data::prepare_instruction_data(instruction->path, tokenizer, chat ? &*chat : nullptr, prepare, &stats);
  });
  if (ctx.rank == 0 && stats.examples > 0) {
    std::string line = "tokenized " + instruction->path + " (" + data::instruction_form_name(instruction->form) +
                       "): " + std::to_string(stats.examples) + " examples, " + std::to_string(stats.tokens) +
                       " tokens, " + std::to_string(stats.trained_tokens) + " of them trained on";
    if (stats.straddling_boundaries > 0)
      line += "; " + std::to_string(stats.straddling_boundaries) + " turn boundaries fall inside a token";
    if (stats.prompt_prefix_mismatches > 0)
      line += "; " + std::to_string(stats.prompt_prefix_mismatches) +
              " prompts encode differently alone than before their completion";
    log::info(line);
  }
  prepare.may_write = false;
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "opening --data " + instruction->path, [&] {
    data::InstructionFile file(
        data::prepare_instruction_data(instruction->path, tokenizer, chat ? &*chat : nullptr, prepare));
    if (file.info().vocab_size > mcfg.vocab_size)
      throw Error(file.path() + ": token ids reach " + std::to_string(file.info().vocab_size) + " but model " +
                  mcfg.name + " has a vocabulary of " + std::to_string(mcfg.vocab_size));
    source = data::packed_row_source(std::move(file), options);
  });
  return source;
}

// What a checkpoint keeps beside the training state: the data position, the model, the tokenizer.
json client_state(const data::TrainingSource& source, const models::ModelConfig& mcfg, const Options& o,
                  const data::Tokenizer& tokenizer, const Config& config, const std::vector<std::string>& adapted) {
  json state = {{"data", source.state()}, {"model", models::hf_config_json(mcfg)},
                {"model_preset", o.init_from.empty() ? o.model : mcfg.name},
                {"tokenizer", tokenizer.name()}};
  // A LoRA run's checkpoint holds the adapters: stratum-ckpt export writes
  // them as a peft adapter, or merged into the base (--merge-lora).
  if (config.lora.enabled) {
    state["lora"] = to_json(config).at("lora");
    state["lora"]["target_modules"] = adapted;
    if (!o.init_from.empty()) state["lora"]["base_model_name_or_path"] = fs::absolute_path(o.init_from);
  }
  return state;
}

// The loaded checkpoint's data position into `source`, every rank agreeing.
void restore_data_position(const json& client, data::TrainingSource& source, const Options& o,
                           const ResumePoint& resume, const distributed::DistContext& ctx) {
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "resuming the data position", [&] {
    if (!client.contains("data")) return;
    try {
      source.load_state(client.at("data").get<data::SamplerState>());
    } catch (const std::exception& e) {
      throw Error(o.save_dir + "/" + resume.tag + "/manifest.json: client_state.data: " + e.what());
    }
  });
}

// Packed rows hold different numbers of trained tokens: each step is the
// mean over its tokens (MicroBatch::loss_tokens), at every layout alike.
MicroBatch micro_batch(const data::TrainingBatch& b) {
  const int64_t tokens = b.segment_ids.defined() ? b.targets.ne(-100).sum().item<int64_t>() : -1;
  return {b.tokens, b.targets, b.segment_ids, b.position_ids, tokens};
}

// The mean loss over the held-out micro-batches (data/training_source.h).
double evaluate(Engine<models::CausalLMImpl>& engine, const data::TrainingSource& source) {
  int next = 0;
  return engine.eval_batch([&] { return micro_batch(source.eval_batch(next++)); }, source.eval_micro_batches());
}

// Why the checkpoint in `tag_dir` does not verify (every shard's checksums,
// finite values, coverage: verify_checkpoint); empty when it does.
std::string verification_problem(const std::string& tag_dir) {
  try {
    verify_checkpoint(tag_dir);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// --resume from `latest`: a checkpoint that does not verify (a flipped bit,
// a truncated shard) is skipped for the newest older one that does, saying so
// (rank 0). When none does, `latest` stays, and loading it names the problem.
ResumePoint newest_verified(const std::string& save_dir, const ResumePoint& latest, bool lead) {
  const std::string why = verification_problem(save_dir + "/" + latest.tag);
  if (why.empty()) return latest;
  const auto tags = list_checkpoint_tags(save_dir);  // oldest first
  const auto at = std::find(tags.begin(), tags.end(), latest.tag);
  for (auto it = std::make_reverse_iterator(at); it != tags.rend(); ++it) {
    const std::string older = verification_problem(save_dir + "/" + *it);
    if (older.empty()) {
      if (lead)
        log::warn("--resume: skipping checkpoint " + save_dir + "/" + latest.tag + " ('latest'): it does not verify: " +
                  why + "; resuming from " + *it + ", the newest checkpoint that does");
      return {ResumePoint::Kind::resume, *it, ""};
    }
    if (lead) log::warn("--resume: checkpoint " + save_dir + "/" + *it + " does not verify either: " + older);
  }
  return latest;
}

// What --resume starts from, decided before the model is built (--resume-tag:
// that tag as it is; --resume: the newest checkpoint that verifies).
ResumePoint resume_point(const Options& o, bool lead) {
  if (!o.resume && o.resume_tag.empty()) return {};
  if (o.save_dir.empty()) throw Error("--resume needs --save-dir: the directory to continue from");
  const ResumePoint point = resolve_resume(o.save_dir, o.resume_tag);
  if (point.kind != ResumePoint::Kind::resume || !o.resume_tag.empty()) return point;
  return newest_verified(o.save_dir, point, lead);
}

// What summary.json says of the run besides its figures: the model, the layout,
// and the largest rank's host memory high-water mark (collective).
json run_about(const models::ModelConfig& mcfg, const Config& config, const distributed::DistContext& ctx,
               const config::BatchSizes& batch, int64_t seq) {
  const RankExtremes host = rank_extremes(ctx, resident_high_water_gib());
  return {{"model", mcfg.name},
          {"host_peak_gib", host.largest},
          {"host_peak_rank", host.rank.value_or(0)},
          {"parameters", models::parameter_count(mcfg)},
          {"ranks", ctx.world_size},
          {"pipeline_stages", config.pipeline.stages},
          {"tensor_parallel", std::max<int64_t>(1, config.tensor_parallel.size)},
          {"zero_stage", config.zero_optimization.stage},
          {"dtype", config::dtype_name(config.precision())},
          {"train_batch_size", batch.train_batch_size},
          {"sequence_length", seq},
          {"device", ctx.on_gpu() ? "cuda" : "cpu"}};
}

// --init-from: the directory's tensors (memory-mapped), checked against the
// whole model before the engine cuts it; each entry a view of one parameter's
// whole tensor. Collective (an error on any rank is every rank's).
struct InitWeights {
  std::map<std::string, at::Tensor> file;   // the directory's tensors, by HF name
  std::map<std::string, at::Tensor> whole;  // each parameter's whole tensor, by Stratum name
  std::map<std::string, quant::Nf4Tensor> nf4;  // a bitsandbytes 4-bit checkpoint's weights, as stored
};
InitWeights read_init_weights(const Options& o, const distributed::DistContext& ctx,
                              const models::CausalLMImpl& model) {
  InitWeights w;
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "reading --init-from " + o.init_from, [&] {
    w.file = models::read_hf_checkpoint(o.init_from);
    // One rank compares a tied model's stored head with its embedding (both whole); the others need not read them.
    models::HfParameters p = models::hf_parameters(model, w.file, o.init_from, {/*compare_tied_head=*/ctx.rank == 0});
    w.whole = std::move(p.whole);
    w.nf4 = std::move(p.nf4);
    // Weights stored in 4 bits are a frozen base: they neither train nor come back in 16 bits.
    for (const auto& item : model.named_parameters(/*recurse=*/true))
      if (w.nf4.count(item.key()) && item.value().requires_grad())
        throw Error("--init-from " + o.init_from + ": '" + item.key() + "' is stored in bitsandbytes' 4-bit NF4 "
                    "but would train"
                    "; a quantized checkpoint fine-tunes as the frozen base of LoRA (a \"lora\" section, the "
                    "layer not in modules_to_save)");
  });
  return w;
}

// After the engine is built: every rank copies the elements it keeps (its
// stage's parameters, its ZeRO partition and tensor-parallel piece of them).
void apply_init_weights(EngineCore& core, const InitWeights& w, const Options& o, const distributed::DistContext& ctx,
                        bool lead) {
  const auto started = std::chrono::steady_clock::now();
  const WeightLoadReport report =
      load_whole_weights(core, w.whole, *ctx.cpu_world, c10::kCPU, "loading --init-from " + o.init_from);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  at::Tensor most = at::tensor({static_cast<double>(report.bytes_copied)}, at::kDouble);
  ctx.cpu_world->all_reduce(most, distributed::ReduceOp::max)->wait();
  double file_bytes = 0;
  for (const auto& [name, t] : w.file) file_bytes += static_cast<double>(t.nbytes());
  char line[256];
  std::snprintf(line, sizeof line, " (%zu tensors, %.2f MB; the most one rank copied: %.2f MB, %.0f%%; %.2f s)",
                w.file.size(), file_bytes / 1e6, most.item<double>() / 1e6,
                100.0 * most.item<double>() / std::max(1.0, file_bytes), seconds);
  if (lead) log::info("initialized from " + o.init_from + line);
}

// --lora-from: a peft adapter that must fit the config's lora section as
// applied to the model (the same scale, exactly its trainable parameters).
PeftAdapter read_lora_from(const Options& o, const Config& config, const models::CausalLMImpl& model) {
  if (!config.lora.enabled) throw Error("--lora-from " + o.lora_from + ": the config has no lora section");
  PeftAdapter a = read_peft_adapter(o.lora_from);
  const auto problems = models::adapter_mismatches(model, config.lora, a.lora, a.tensors);
  if (problems.empty()) return a;
  std::string m = "--lora-from " + o.lora_from + " does not fit the config's lora section on this model:";
  for (size_t i = 0; i < problems.size() && i < 12; ++i) m += "\n  " + problems[i];
  if (problems.size() > 12) m += "\n  and " + std::to_string(problems.size() - 12) + " more";
  throw Error(m);
}

// "LoRA r 16, alpha 32 (scale 2): 112 layers adapted, 42.0M of 8.07B parameters train",
// the whole model's (a tensor-parallel rank's pieces whole, an expert-parallel
// rank's experts as many times as the ranks splitting them: the experts of a
// layer are alike).
std::string lora_summary(const config::LoraConfig& l, const models::CausalLMImpl& model,
                         const std::vector<std::string>& adapted, int64_t ep) {
  auto in_expert = [](const std::string& name) { return name.find(".experts.") != std::string::npos; };
  int64_t trained = 0, all = 0, layers = 0;
  for (const auto& path : adapted) layers += in_expert(path) ? ep : 1;
  const nn::tp::TensorParallel& tp = model.tensor_parallel();
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const auto spec = tp.enabled() ? model.shard_spec(item.key(), tp.rank()) : std::nullopt;
    int64_t n = in_expert(item.key()) ? ep : 1;
    for (int64_t d : spec ? nn::tp::whole_shape(item.value().sizes().vec(), *spec) : item.value().sizes().vec()) n *= d;
    all += n;
    if (item.value().requires_grad()) trained += n;
  }
  char line[256];
  std::snprintf(line, sizeof line, "LoRA r %lld, alpha %g (scale %g%s): %zu layers adapted, %.2fM of %.2fM parameters train",
                static_cast<long long>(l.r), l.lora_alpha, nn::lora_scale(l.r, l.lora_alpha, l.use_rslora),
                l.use_rslora ? ", rsLoRA" : "", static_cast<size_t>(layers), trained / 1e6, all / 1e6);
  return line;
}

// --resume with another tokenizer than the checkpoint's would read the data
// as other ids (and the model knows the old ones): refused, naming both.
void check_resumed_tokenizer(const Options& o, const ResumePoint& resume, const data::Tokenizer& tokenizer) {
  const std::string tag_dir = o.save_dir + "/" + resume.tag;
  const json client = read_checkpoint_manifest(tag_dir).client_state;
  if (!client.contains("tokenizer") || !client["tokenizer"].is_string()) return;  // not saved by stratum-train
  const std::string saved = client["tokenizer"].get<std::string>();
  if (saved != tokenizer.name())
    throw Error(tag_dir + "/manifest.json: the checkpoint was trained with tokenizer " + saved + ", this run's is " +
                tokenizer.name() + " (" + tokenizer_spec(o) + "); resume with the one it was trained with (--tokenizer) "
                "or start afresh in another --save-dir");
}

int train(const Options& o, const distributed::DistContext& ctx) {
  const bool lead = ctx.rank == 0;
  // Every rank reads the config, model and resume point itself (their files may
  // differ between hosts); a failure on any rank ends all of them together.
  std::optional<Config> config_read;
  models::ModelConfig mcfg;
  std::unique_ptr<data::Tokenizer> tokenizer_owner;
  ResumePoint resume;
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "reading the config", [&] {
    config_read.emplace(Config::from_file(o.config_path));
    std::vector<std::pair<std::string, std::string>> overrides;
    for (const auto& s : o.overrides) overrides.push_back(models::parse_override(s));
    if (o.init_from.empty()) {
      mcfg = models::make_model_config(o.model, overrides);
    } else {
      mcfg = models::read_hf_model_config(o.init_from);
      for (const auto& [key, value] : overrides) models::apply_override(mcfg, key, value);
      models::validate(mcfg);
    }
    tokenizer_owner = data::load_tokenizer(tokenizer_spec(o));
    const data::Tokenizer& tokenizer = *tokenizer_owner;
    if (mcfg.vocab_size < tokenizer.vocab_size())
      throw Error((o.init_from.empty() ? "--model " + o.model : "--init-from " + o.init_from) + ": vocabulary " +
                  std::to_string(mcfg.vocab_size) + " is smaller than the " +
                  tokenizer.name() + " tokenizer's " + std::to_string(tokenizer.vocab_size()));
    models::apply_moe_section(mcfg, config_read->moe, o.config_path);
    const int64_t kv_heads = mcfg.kv_heads > 0 ? mcfg.kv_heads : mcfg.heads;
    if (auto problems = engine_detail::context_parallel_problems(*config_read, mcfg.heads, kv_heads, mcfg.max_seq_len,
                                                                 mcfg.attention_dropout_p());
        !problems.empty())
      throw ConfigError(o.config_path, problems);
    resume = resume_point(o, lead);
    if (resume.kind == ResumePoint::Kind::resume) check_resumed_tokenizer(o, resume, tokenizer);
  });
  Config& config = *config_read;
  const data::Tokenizer& tokenizer = *tokenizer_owner;
  if (lead && tokenizer.name() != "byte")
    log::info("tokenizer: " + tokenizer_spec(o) + " (" + tokenizer.name() + ", " +
              std::to_string(tokenizer.vocab_size()) + " ids)");
  for (const auto& note : config.notes)
    if (lead) log::info(o.config_path + ": note: " + note);
  if (lead && !config.optimizer) log::info(o.config_path + ": note: " + config::default_optimizer_note());
  // The grid, once: every rank's coordinates and the job's communicators; a
  // shape that does not fit is refused here, by key, on every rank alike.
  std::optional<distributed::ProcessGrid> grid;
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "building the process grid",
                                [&] { grid.emplace(distributed::ProcessGrid::create(config, ctx)); });
  const auto places = distributed::rank_places(*ctx.cpu_world, ctx.cuda_device);
  if (lead && ctx.world_size > 1) {
    std::string table = grid->table(places);
    if (!table.empty() && table.back() == '\n') table.pop_back();
    log::info(table);
  }

  torch::manual_seed(o.seed);
  // Born sharded: the model is a skeleton (shapes only) of which the engine
  // draws, on the training device, only what the rank keeps: its stage, its
  // tensor-parallel pieces, at ZeRO-3 one layer at a time as it partitions
  // it. Every layout starts from the single process's weights: each
  // parameter is drawn by name (models/causal_lm.h), and always on the
  // training device, whose generator the values follow (a GPU's differ from
  // the host's).
  nn::tp::TensorParallel tp;
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "building the model", [&] {
    tp = tensor_parallel_group(config, *grid);
    models::validate_tensor_parallel(mcfg, tp.size());
  });
  auto model = models::construct_model(mcfg, tp, c10::kMeta, nn::moe::ExpertParallel{grid->ep_group()});
  // LoRA: adapters on the target layers, the rest frozen (the engine trains
  // and checkpoints what requires a gradient).
  std::vector<std::string> adapted_layers;
  std::optional<PeftAdapter> adapter;
  if (config.lora.enabled) {
    distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "adding LoRA adapters", [&] {
      adapted_layers = models::apply_lora(*model, config.lora);
      if (!o.lora_from.empty()) adapter = read_lora_from(o, config, *model);
    });
    if (lead) log::info(lora_summary(config.lora, *model, adapted_layers, grid->ep()));
  }
  // --init-from: the Hugging Face weights replace the drawn ones once the
  // engine holds its parts. A resumed checkpoint holds what trains; a frozen
  // base comes from --init-from again.
  std::optional<InitWeights> init;
  if (!o.init_from.empty() && (resume.kind != ResumePoint::Kind::resume || config.lora.enabled))
    init = read_init_weights(o, ctx, *model);
  // A GPU running out of memory ends the job with what would lower the peak.
  MemorySettings memory;
  memory.model = mcfg.name;
  memory.seq = mcfg.max_seq_len;
  memory.zero_stage = config.zero_optimization.stage;
  memory.offload_optimizer = config.zero_optimization.offload_optimizer.device != config::OffloadDevice::none;
  memory.offload_param = config.zero_optimization.offload_param.device != config::OffloadDevice::none;
  memory.checkpointing = config.activation_checkpointing.enabled;
  memory.cpu_checkpointing = config.activation_checkpointing.cpu_checkpointing;
  memory.host_checkpoint_blocks = config.activation_checkpointing.cpu_checkpointing_layers.value_or(-1);
  memory.tiled_mlp_tokens = mcfg.tiled_mlp_tokens;
  memory.tiled_loss_tokens = mcfg.tiled_loss_tokens;
  memory.allocator_conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  auto explained = [&](const std::string& where, const c10::OutOfMemoryError& e,
                       MemoryPhase phase = MemoryPhase::training) {
    return Error(explain_out_of_memory(where, e.what_without_backtrace(), memory, phase));
  };
  // One engine for every layout: under a pipeline each rank holds its stage.
  std::optional<Engine<models::CausalLMImpl>> built;
  distributed::agree_on_success(*ctx.cpu_world, c10::kCPU, "building the engine", [&] {
    try {
      built.emplace(initialize(config, model, *grid));
    } catch (const c10::OutOfMemoryError& e) {
      throw explained("building the engine", e, MemoryPhase::start_up);
    }
  });
  Engine<models::CausalLMImpl>& engine = *built;
  if (init) {
    if (resume.kind != ResumePoint::Kind::resume) apply_init_weights(engine.core(), *init, o, ctx, lead);
    if (config.lora.enabled)
      load_frozen_weights(*model, model.get(), init->whole, *ctx.cpu_world, c10::kCPU,
                          "loading the frozen base from --init-from " + o.init_from, init->nf4,
                          engine.core().frozen_units());
    init.reset();  // unmaps the files
  }
  // After the base: an adapter's modules_to_save replace the base's values.
  if (adapter && resume.kind != ResumePoint::Kind::resume) {
    const std::map<std::string, at::Tensor> values(adapter->tensors.begin(), adapter->tensors.end());
    load_whole_weights(engine.core(), values, *ctx.cpu_world, c10::kCPU, "loading --lora-from " + o.lora_from);
    if (lead) log::info("adapters from " + o.lora_from + " (" + std::to_string(values.size()) + " tensors)");
  }
  adapter.reset();
  if (const zero::FrozenUnits* frozen = engine.core().frozen_units(); frozen && lead) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "frozen base partitioned over %lld data-parallel ranks (ZeRO-3): %.1f MiB held per rank of %.1f "
                  "MiB, gathered a layer at a time as %s",
                  static_cast<long long>(engine.core().dp()->size()), frozen->held_bytes() / 1048576.0,
                  frozen->whole_bytes() / 1048576.0,
                  config.lora.base_dtype == config::LoraBaseDType::nf4 ? "NF4 (4 bits a weight)" : "stored");
    log::info(line);
  }
  report_startup_peak(ctx, lead);
  const auto& batch = engine.core().batch();
  // Every rank reading data of its own: the expert-parallel ones are data-parallel ranks too.
  const auto& dp = engine.core().data_parallel();
  const int64_t seq = mcfg.max_seq_len;

  data::TrainingSourceOptions source_options;
  source_options.seq_len = seq;
  source_options.micro_batch = batch.micro_batch_per_gpu;
  source_options.eval_batches = o.eval_batches;
  source_options.eval_fraction = o.eval_fraction;
  // A context-parallel group reads one batch (each rank keeps its part of the sequence).
  source_options.dp_rank = static_cast<int>(dp->rank() / grid->cp());
  source_options.dp_size = static_cast<int>(dp->size() / grid->cp());
  source_options.seed = o.seed;
  source_options.documents = document_windows(o);
  const std::unique_ptr<data::TrainingSource> source = open_training_source(o, ctx, tokenizer, mcfg, source_options);

  // Checkpoints: every layout loads them (the data position is the first stage's).
  if (resume.kind == ResumePoint::Kind::resume) {
    restore_data_position(load_checkpoint(engine, o.save_dir, resume.tag), *source, o, resume, ctx);
    if (lead) log::info("resumed at step " + std::to_string(engine.global_steps()) + ", data " + data::to_string(source->state()));
  } else if ((o.resume || !o.resume_tag.empty()) && lead) {
    log::info("--resume: " + resume.reason + "; starting fresh");
  }

  const int64_t print_every = o.print_every > 0 ? o.print_every : config.steps_per_print.value_or(10);
  monitor::ProgressReporter progress(print_every);
  // wall_clock_breakdown's timer lines, the flops profile and the communication
  // summary as lines that stay above the progress line (rank 0); another
  // stage's first rank prints its own timer lines, named by stage.
  if (lead) {
    engine.core().set_report_sink([&progress](const std::string& text) { progress.note(text); });
  } else if (engine.stages() > 1 && grid->coord().tp == 0) {
    const std::string prefix = "pipeline stage " + std::to_string(engine.stage()) + ": ";
    engine.core().set_report_sink([prefix](const std::string& text) { std::cout << prefix << text << std::endl; });
  } else {
    engine.core().set_report_sink([](const std::string&) {});  // another tensor-parallel rank's copy
  }
  monitor::RunRecords records(config, o.log_dir, batch.train_batch_size, lead);
  const double flops_per_token = models::training_flops_per_token(mcfg, seq);
  const int64_t tokens_per_step = batch.train_batch_size * seq;
  if (lead)
    log::info(models::describe(mcfg) + " | data " + source->path() + " (" + source->details() + ", " +
              std::to_string(source->train_sequences()) + " train / " + std::to_string(source->eval_sequences()) +
              " eval sequences) | batch " + std::to_string(batch.train_batch_size) + " = " +
              std::to_string(batch.micro_batch_per_gpu) + " x " + std::to_string(batch.gradient_accumulation_steps) +
              " x " + std::to_string(dp->size() / grid->cp()) + " data-parallel" +
              (grid->cp() > 1 ? " | each sequence over " + std::to_string(grid->cp()) + " context-parallel ranks (" +
                                    config.context_parallel.method + ")"
                              : "") +
              (engine.stages() > 1 ? " | " + std::to_string(engine.stages()) + " pipeline stages, " +
                                         config::pipeline_schedule_name(config.pipeline.schedule)
                                   : "") +
              (tp.enabled() ? " | tensor parallel " + std::to_string(tp.size()) +
                                  (tp.sequence_parallel ? " with sequence parallelism" : "")
                            : "") +
              (grid->ep() > 1 ? " | experts over " + std::to_string(grid->ep()) + " expert-parallel ranks" : "") +
              " | ZeRO " + std::to_string(config.zero_optimization.stage) +
              " | " + c10::toString(engine.core().model_dtype()));

  // "checkpoint": {"async": true}: a save blocks only while the states are
  // copied to host memory; each is published once every rank has written it
  // (checked after each step), at the next save or at the end.
  CheckpointSaver saver(config.checkpoint.async, [&](const CheckpointSaveReport& r) {
    char seconds[96];
    std::snprintf(seconds, sizeof seconds, "blocked %.3f s, writing %.3f s", r.blocked_seconds, r.write_seconds);
    if (lead)
      progress.note("saved checkpoint " + r.dir + " (" + fs::describe_bytes(r.bytes) + ", " + seconds +
                    (r.async ? ", host staging " + fs::describe_bytes(r.staging_bytes) + " on rank 0" : "") + ")");
  });
  if (!o.save_dir.empty()) saver.reserve_staging(engine.core());  // pinned while the first steps run
  auto save = [&]() {
    const json client = client_state(*source, mcfg, o, tokenizer, config, adapted_layers);
    const std::string tag = "global_step" + std::to_string(engine.global_steps());
    // The tokenizer's files go into each checkpoint, as Hugging Face's Trainer
    // keeps them: `stratum-ckpt export` puts them beside the exported model.
    CheckpointSaveOptions options;
    for (const std::string& file : tokenizer.files()) options.files[file.substr(file.rfind('/') + 1)] = file;
    save_checkpoint(saver, engine, o.save_dir, tag, client, options);
  };

  memory.micro_batch = batch.micro_batch_per_gpu;

  const auto started = std::chrono::steady_clock::now();
  const double injected_delay = straggler_fault_seconds(ctx.rank);
  monitor::StragglerCheck stragglers;
  while (engine.global_steps() < o.steps) {
    const auto t0 = std::chrono::steady_clock::now();
    const double waited_before = ctx.flight ? ctx.flight->waited_seconds() : 0.0;
    if (injected_delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(injected_delay));
    double loss = 0;
    try {
      loss = engine.train_batch([&] { return micro_batch(source->next()); });
    } catch (const c10::OutOfMemoryError& e) {
      throw explained("step " + std::to_string(engine.global_steps() + 1), e);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double waited = ctx.flight ? ctx.flight->waited_seconds() - waited_before : 0.0;
    const double busy = std::max(0.0, seconds - waited);
    monitor::StepMetrics m;
    m.step = engine.global_steps();
    m.total_steps = o.steps;
    m.loss = loss;
    m.lr = engine.lr();
    m.loss_scale = engine.loss_scale();
    m.tokens_per_second = tokens_per_step / seconds;
    m.mfu = ctx.on_gpu() ? m.tokens_per_second / ctx.world_size * flops_per_token / (o.peak_tflops * 1e12) : 0.0;
    const StepFigures figures = gather_step_figures(ctx, busy, engine.stage());
    m.memory_gib = figures.largest_memory;
    m.memory_rank = figures.memory_rank;
    for (const std::string& line : stragglers.update(m.step, figures.busy, figures.stage))
      if (lead) progress.note(line);
    if (const std::vector<int> slow = stragglers.flagged(); !slow.empty()) m.straggler = slow.front();
    m.skipped = engine.last_step_skipped();
    if (engine.pipeline()) m.bubble = engine.pipeline()->last_timing().bubble();
    if (const RoutingStats* routing = routing_stats(engine.core())) {
      m.expert_imbalance = routing->imbalance;
      m.experts_dropped = routing->dropped_fraction;
    }
    // Decided on every rank alike.
    const bool do_eval =
        o.eval_every > 0 && (m.step % o.eval_every == 0 || m.step == o.steps) && source->eval_micro_batches() > 0;
    std::optional<double> eval_loss;
    if (do_eval) {
      try {
        eval_loss = evaluate(engine, *source);
      } catch (const c10::OutOfMemoryError& e) {
        throw explained("the evaluation after step " + std::to_string(m.step), e);
      }
    }
    if (lead) {
      progress.update(m);
      if (eval_loss) progress.note("step " + std::to_string(m.step) + ": eval loss " + std::to_string(*eval_loss));
    }
    records.step(m, engine.core().last_grad_norm(), eval_loss);
    saver.poll();  // publishes a background save once every rank has written it
    if (!o.save_dir.empty() && o.save_every > 0 && m.step % o.save_every == 0 && m.step < o.steps) save();
  }
  if (!o.save_dir.empty()) save();
  saver.finish();  // the end of training waits for the last save
  if (lead) progress.finish();
  const json about = run_about(mcfg, config, ctx, batch, seq);
  if (lead && ctx.on_gpu()) {  // on CPU ranks the memory column is this already
    char text[96];
    std::snprintf(text, sizeof text, "host memory high-water mark %.2f GiB", about["host_peak_gib"].get<double>());
    log::info(text + (ctx.world_size > 1 ? " (rank " + std::to_string(about["host_peak_rank"].get<int>()) + ")" : ""));
  }
  records.finish(about, mcfg.name + ", " + std::to_string(ctx.world_size) + " ranks",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());

  // Every rank generates (the same tokens: same seed): ZeRO-3's gathers and the stages' forwards are collective.
  // Pretokenized data (llm.c, Megatron) came with a tokenizer this program does not load: no text to show.
  if (o.sample_tokens > 0 && source->tokenizer_name() != tokenizer.name()) {
    if (lead)
      log::info("no sample: the data was tokenized by '" + source->tokenizer_name() + "', which stratum-train cannot decode");
  } else if (o.sample_tokens > 0) {
    std::vector<int64_t> prompt;
    for (int32_t id : tokenizer.encode(o.prompt)) prompt.push_back(id);
    const std::vector<int64_t> out =
        engine.generate(prompt, models::GenerateOptions{o.sample_tokens, o.temperature, o.top_k, o.seed});
    std::vector<int32_t> ids(out.begin(), out.end());
    if (lead)
      std::cout << "--- sample (" << o.sample_tokens << " tokens, temperature " << o.temperature << ") ---\n"
                << data::to_valid_utf8(tokenizer.decode(ids)) << "\n--- end of sample ---" << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a built-in GPT-2 / LLaMA model with Stratum"};
  Options o;
  const auto at_least = [](int64_t lo) { return CLI::Range(lo, std::numeric_limits<int64_t>::max()); };
  app.add_option("--config", o.config_path, "DeepSpeed ds_config.json")->required();
  app.add_option("--model", o.model, "preset: " + [] {
    std::string s;
    for (const auto& n : models::preset_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }());
  app.add_option("--lora-from", o.lora_from,
                 "a peft adapter directory (adapter_config.json + adapter_model.safetensors): the adapters start "
                 "from it (the config's lora section must describe the same adapters)");
  app.add_option("--init-from", o.init_from,
                 "a Hugging Face model directory (config.json, model.safetensors or its shards with "
                 "model.safetensors.index.json): fine-tune from its weights (GPT-2, LLaMA)")
      ->excludes("--model");
  app.add_option("--tokenizer", o.tokenizer,
                 "'byte', a Hugging Face tokenizer.json, a SentencePiece tokenizer.model, a directory holding one, or "
                 "a Stratum BPE merges file (default: the --init-from directory's tokenizer, else byte)");
  app.add_option("--set", o.overrides, "override a model dimension, e.g. --set layers=6 (repeatable)");
  app.add_option("--data", o.data,
                 "a token file, a .txt file, a directory of .txt files, a .jsonl file of {\"text\": ...}, an llm.c shard, a Megatron dataset PREFIX, or "
                 "'default'; several as Megatron's weighted blend: --data 0.7 a 0.3 b; instruction data, packed, the "
                 "loss on the answers only: chat:FILE.jsonl ({\"messages\": [...]}, rendered with the chat template) "
                 "or prompt-completion:FILE.jsonl ({\"prompt\": ..., \"completion\": ...})")
      ->expected(1, -1);
  app.add_option("--documents", o.documents,
                 "token windows over documents: 'joined' (default: a window is one sequence, attention reads across "
                 "document boundaries) or 'separate' (a segment per document, from the data's document index: each "
                 "text file of a directory, each JSON Lines record, each llm.c or Megatron document; attention stays "
                 "within each; instruction data is always packed apart)")
      ->check(CLI::IsMember({"joined", "separate"}));
  app.add_option("--document-positions", o.document_positions,
                 "with --documents separate: 'restart' (default: positions 0, 1, ... from each document's first token) "
                 "or 'continue' (positions run on through the window)")
      ->check(CLI::IsMember({"restart", "continue"}));
  app.add_option("--cross-document-targets", o.cross_document_targets,
                 "with --documents separate: 'keep' (default: a document's last token is trained to predict the next "
                 "document's first, as Megatron does) or 'mask' (no loss there, Megatron's eod_mask_loss)")
      ->check(CLI::IsMember({"keep", "mask"}));
  app.add_option("--chat-template", o.chat_template,
                 "a Jinja chat template file for chat:FILE data (default: the tokenizer's tokenizer_config.json)");
  app.add_option("--cache-dir", o.cache_dir, "where tokenized text and the default corpus are kept");
  app.add_option("--steps", o.steps, "optimizer steps to train to")->check(at_least(0));
  app.add_option("--eval-every", o.eval_every, "evaluate on held-out data every N steps (0: never)")->check(at_least(0));
  app.add_option("--eval-batches", o.eval_batches, "micro-batches per rank per evaluation")->check(at_least(1));
  app.add_option("--eval-fraction", o.eval_fraction, "share of the data held out for evaluation")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--save-dir", o.save_dir, "checkpoint directory (saves at the end, and every --save-every steps)");
  app.add_option("--save-every", o.save_every, "checkpoint every N steps (0: only at the end)")->check(at_least(0));
  app.add_flag("--resume", o.resume,
               "continue from the checkpoint 'latest' names in --save-dir (an absent or empty directory starts fresh)");
  app.add_option("--resume-tag", o.resume_tag, "continue from this tag in --save-dir (implies --resume)");
  app.add_option("--seed", o.seed, "initial weights, data order and sampling");
  app.add_option("--log-dir", o.log_dir, "metrics.csv / metrics.jsonl here (default: the csv_monitor section)");
  app.add_option("--print-every", o.print_every, "plain progress lines every N steps (default: steps_per_print or 10)")
      ->check(at_least(0));
  app.add_option("--sample-tokens", o.sample_tokens, "tokens of generated text to print at the end (0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--prompt", o.prompt, "prompt of the final sample");
  app.add_option("--temperature", o.temperature, "sampling temperature (0: greedy)")->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", o.top_k, "sample among the k most likely tokens (0: all)")->check(at_least(0));
  app.add_option("--peak-tflops", o.peak_tflops, "device peak TFLOP/s for MFU (H200 bf16 dense: 989)")
      ->check(CLI::Range(1e-3, 1e6));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "stratum-train: error: " << e.what() << " (see --help)" << std::endl;
    return 2;
  }
  return distributed::run_distributed_job("stratum-train", [&](distributed::DistContext& ctx) { return train(o, ctx); });
}
