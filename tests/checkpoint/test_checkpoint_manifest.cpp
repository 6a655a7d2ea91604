// The checkpoint manifest reader against hostile manifests: every field is
// validated (ranges, types, cross-field rules), every problem reported at
// once naming the file and key, and nothing from nlohmann or torch escapes.
#include <gtest/gtest.h>

#include <chrono>

#include "stratum/checkpoint/manifest.h"
#include "stratum/core/error.h"

namespace {

using namespace stratum;
using nlohmann::json;

// What save_checkpoint writes for 2 ranks and one 2x3 parameter split 4 + 2.
json valid() {
  CheckpointManifest m;
  m.tag = "global_step5";
  m.global_steps = 5;
  m.micro_steps = 10;
  m.skipped_steps = 1;
  m.zero_stage = 1;
  m.data_parallel_size = 2;
  m.model_dtype = "BFloat16";
  m.params = {{"w", {2, 3}, 6}};
  m.shards = {{shard_file_name(0), 0, {{0, 0, 4}}, {{"master|w|0", 0x12345678u}, {"rng|cpu", 1u}}},
              {shard_file_name(1), 1, {{0, 4, 2}}, {{"master|w|4", 0xdeadbeefu}, {"rng|cpu", 2u}}}};
  m.adam_step = 4;
  m.lr_last_batch_iteration = 4;
  m.client_state = {{"data", {{"seed", 1}, {"epoch", 0}, {"position", 40}}}};
  return json::parse(manifest_to_json_text(m));
}

std::string problems_of(const json& m) {
  try {
    parse_checkpoint_manifest(m.dump(), "ckpt/global_step5/manifest.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointManifest, RoundTripsWhatASaveWrites) {
  const CheckpointManifest m = parse_checkpoint_manifest(valid().dump(), "m.json");
  EXPECT_EQ(m.version, kCheckpointVersion);
  EXPECT_EQ(m.global_steps, 5);
  EXPECT_EQ(m.shards.at(1).fragments.at(0).start, 4);
  EXPECT_EQ(m.shards.at(1).checksums.at("master|w|4"), 0xdeadbeefu);
  EXPECT_EQ(m.client_state.at("data").at("position"), 40);
  EXPECT_EQ(m.total_numel(), 6);
  EXPECT_FALSE(m.offload_optimizer);  // a manifest written before the key: nothing offloaded
  json offloaded = valid();
  offloaded["offload"] = {{"optimizer", true}, {"param", false}};
  EXPECT_TRUE(parse_checkpoint_manifest(offloaded.dump(), "m.json").offload_optimizer);
  offloaded["offload"]["param"] = "yes";
  EXPECT_NE(problems_of(offloaded).find("offload.param: expected true or false, got \"yes\""), std::string::npos)
      << problems_of(offloaded);
}

TEST(CheckpointManifest, OutOfRangeCountersAreNamedAllAtOnce) {
  json m = valid();
  m["global_steps"] = -4;
  m["zero_stage"] = 7;
  m["data_parallel_size"] = 0;
  m["loss_scaler"]["cur_scale"] = -1.0;
  m["adam_step"] = "four";
  const std::string e = problems_of(m);
  EXPECT_NE(e.find("ckpt/global_step5/manifest.json: invalid checkpoint manifest"), std::string::npos) << e;
  EXPECT_NE(e.find("global_steps: expected 0..9223372036854775807, got -4"), std::string::npos) << e;
  EXPECT_NE(e.find("zero_stage: expected 0..3, got 7"), std::string::npos) << e;
  EXPECT_NE(e.find("data_parallel_size: expected 1..1048576, got 0"), std::string::npos) << e;
  EXPECT_NE(e.find("loss_scaler.cur_scale: expected a finite number"), std::string::npos) << e;
  EXPECT_NE(e.find("adam_step: expected a number, got \"four\""), std::string::npos) << e;
}

TEST(CheckpointManifest, MissingKeysAndWrongTypesAreNamed) {
  json m = valid();
  m.erase("zero_stage");
  m["micro_steps"] = 2.5;
  m["lr_scheduler"] = json::array();
  const std::string e = problems_of(m);
  EXPECT_NE(e.find("zero_stage: missing"), std::string::npos) << e;
  EXPECT_NE(e.find("micro_steps: expected an integer, got 2.5"), std::string::npos) << e;
  EXPECT_NE(e.find("lr_scheduler: expected an object, got []"), std::string::npos) << e;
}

TEST(CheckpointManifest, SizesAndFragmentsMustFitTheirParameters) {
  json m = valid();
  m["params"][0]["shape"] = {2, -3};
  EXPECT_NE(problems_of(m).find("params[0].shape[1]: expected 0..9223372036854775807, got -3"), std::string::npos);
  m = valid();
  m["params"][0]["numel"] = 7;
  EXPECT_NE(problems_of(m).find("params[0].numel: 7, but its shape holds 6"), std::string::npos);
  m = valid();
  m["params"][0]["shape"] = {int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_NE(problems_of(m).find("params[0].shape: the element count overflows 64 bits"), std::string::npos);
  m = valid();
  m["shards"][1]["fragments"][0] = {0, 4, 3};
  EXPECT_NE(problems_of(m).find("shards[1].fragments[0]: elements 4 + 3 go past parameter 'w' (6 elements)"),
            std::string::npos) << problems_of(m);
  m["shards"][1]["fragments"][0] = {3, 0, 1};
  EXPECT_NE(problems_of(m).find("shards[1].fragments[0][0]: expected 0..0, got 3"), std::string::npos);
  m["shards"][1]["fragments"][0] = {0, int64_t{9223372036854775807}, 2};
  EXPECT_NE(problems_of(m).find("go past parameter 'w'"), std::string::npos);  // no signed overflow
  m["shards"][1]["fragments"][0] = {0, 4};
  EXPECT_NE(problems_of(m).find("expected [parameter index, first element, elements(, piece)]"), std::string::npos);
}

// Two tensor-parallel ranks, each holding one row of a 2x3 parameter (piece
// 0 and 1 of 2): the pieces round-trip and must fit the split.
json tensor_parallel_valid() {
  CheckpointManifest m = parse_checkpoint_manifest(valid().dump(), "m.json");
  m.data_parallel_size = 1;
  m.tensor_parallel_size = 2;
  m.params[0].split = ManifestSplit{0, 1, 2, 0};
  m.shards[0].fragments = {{0, 0, 3, 0}};
  m.shards[1].fragments = {{0, 0, 3, 1}};
  return json::parse(manifest_to_json_text(m));
}

TEST(CheckpointManifest, TensorParallelPiecesRoundTripAndMustFitTheirSplit) {
  const CheckpointManifest m = parse_checkpoint_manifest(tensor_parallel_valid().dump(), "m.json");
  EXPECT_EQ(m.tensor_parallel_size, 2);
  EXPECT_EQ(m.params[0].split.parts, 2);
  EXPECT_EQ(m.params[0].piece_numel(), 3);
  EXPECT_EQ(m.shards[1].fragments[0].piece, 1);
  json j = tensor_parallel_valid();
  j["shards"][1]["fragments"][0] = {0, 1, 3, 1};
  EXPECT_NE(problems_of(j).find("shards[1].fragments[0]: elements 1 + 3 go past parameter 'w' piece 1 (3 elements)"),
            std::string::npos) << problems_of(j);
  j["shards"][1]["fragments"][0] = {0, 0, 3, 2};
  EXPECT_NE(problems_of(j).find("shards[1].fragments[0][3]: expected 0..1, got 2"), std::string::npos) << problems_of(j);
  j = tensor_parallel_valid();
  j["params"][0]["split"]["parts"] = 4;
  EXPECT_NE(problems_of(j).find("params[0].split.parts: 4 pieces do not divide the 2 tensor-parallel ranks"),
            std::string::npos) << problems_of(j);
  j = tensor_parallel_valid();
  j["params"][0]["split"]["dim"] = 1;  // 3 columns do not split in 2
  EXPECT_NE(problems_of(j).find("params[0].split: 3 does not split into 1 blocks of 2 pieces"), std::string::npos)
      << problems_of(j);
  j = tensor_parallel_valid();
  j["shards"].erase(1);
  EXPECT_NE(problems_of(j).find("shards: 1 shards, but data_parallel_size is 1 x 2 tensor-parallel ranks"),
            std::string::npos) << problems_of(j);
}

TEST(CheckpointManifest, ShardsAreTheRanksOwnFiles) {
  json m = valid();
  m["shards"][1]["file"] = "../../other/rank_00001.safetensors";
  EXPECT_NE(problems_of(m).find("shards[1].file: \"../../other/rank_00001.safetensors\", expected 'rank_00001.safetensors'"),
            std::string::npos) << problems_of(m);
  m = valid();
  m["shards"].erase(1);
  EXPECT_NE(problems_of(m).find("shards: 1 shards, but data_parallel_size is 2"), std::string::npos);
  m = valid();
  m["shards"][1]["checksums"]["master|w|4"] = "DEADBEEF!";
  EXPECT_NE(problems_of(m).find("expected 8 lowercase hex digits"), std::string::npos);
  m = valid();
  m["tag"] = "../elsewhere";
  EXPECT_NE(problems_of(m).find("tag: a tag names a directory inside the checkpoint directory"), std::string::npos);
}

TEST(CheckpointManifest, NotAManifestIsSaidPlainly) {
  EXPECT_NE(problems_of(json::array()).find("not a JSON object"), std::string::npos);
  json m = valid();
  m["format"] = "deepspeed";
  EXPECT_NE(problems_of(m).find("not a Stratum checkpoint manifest"), std::string::npos);
  m = valid();
  m["version"] = 3;
  EXPECT_NE(problems_of(m).find("checkpoint format version 3, this build reads 1..2"), std::string::npos);
  try {
    parse_checkpoint_manifest("{\"format\": ", "m.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m.json: corrupt manifest (not JSON)"), std::string::npos) << e.what();
  }
}

TEST(CheckpointManifest, DeepNestingIsRefusedQuickly) {
  std::string text = "{\"format\": \"stratum-checkpoint\", \"client_state\": ";
  text += std::string(100000, '[') + std::string(100000, ']') + "}";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    parse_checkpoint_manifest(text, "m.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 64 levels"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST(CheckpointManifest, FormatOneWithoutChecksumsStillReads) {
  json m = valid();
  m["version"] = 1;
  for (auto& s : m["shards"]) s.erase("checksums");
  m["client_state"] = nullptr;
  const CheckpointManifest parsed = parse_checkpoint_manifest(m.dump(), "m.json");
  EXPECT_FALSE(parsed.has_checksums());
  EXPECT_TRUE(parsed.client_state.is_object());
}

}  // namespace
