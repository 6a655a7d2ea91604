// SamplerState <-> JSON, apart so that only this file parses nlohmann/json.hpp.
#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/data/sampler.h"

namespace stratum::data {

void to_json(nlohmann::json& j, const SamplerState& s) {
  j = nlohmann::json{{"seed", s.seed}, {"epoch", s.epoch}, {"position", s.position}};
}

void from_json(const nlohmann::json& j, SamplerState& s) {
  const auto field = [&](const char* key) -> const nlohmann::json& {
    if (!j.is_object() || !j.contains(key))
      throw Error(std::string("data sampler state: missing '") + key + "' in " + j.dump());
    const auto& v = j.at(key);
    if (!v.is_number_integer()) throw Error(std::string("data sampler state: '") + key + "' is not an integer in " + j.dump());
    return v;
  };
  s.seed = field("seed").get<uint64_t>();
  s.epoch = field("epoch").get<int64_t>();
  s.position = field("position").get<int64_t>();
}

}  // namespace stratum::data
