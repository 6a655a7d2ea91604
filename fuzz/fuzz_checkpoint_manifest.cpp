// The checkpoint manifest reader (checkpoint/manifest.h, torch-free):
// text -> the validated manifest. An accepted manifest must survive what the
// loader does with it: its element total, and written back out, read again.
#include <cstddef>
#include <cstdint>
#include <string>

#include "stratum/checkpoint/manifest.h"
#include "stratum/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  stratum::CheckpointManifest manifest;
  try {
    manifest = stratum::parse_checkpoint_manifest(text, "fuzz/manifest.json");
  } catch (const stratum::Error&) {
    return 0;
  }
  (void)manifest.total_numel();
  try {
    stratum::parse_checkpoint_manifest(stratum::manifest_to_json_text(manifest), "fuzz/rewritten.json");
  } catch (const stratum::Error&) {
    __builtin_trap();  // what the writer writes, the reader must read
  }
  return 0;
}
