#pragma once
// The message of the stratum::Error that f throws ("" when it throws none).
#include <string>

#include "stratum/core/error.h"

namespace stratum::test {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace stratum::test
