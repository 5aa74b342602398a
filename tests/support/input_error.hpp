// The message of the InputError that `f` throws ("" when it throws none),
// for tests of bad input's one-line errors.
#pragma once

#include <functional>
#include <string>

#include "geotrain/common/errors.hpp"

namespace geotrain::testing {

inline std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace geotrain::testing
