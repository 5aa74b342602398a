#include "settings.hpp"

#include <cstdlib>
#include <cstring>

#include "cuda_emu_engine.hpp"

namespace cuda_emu {
namespace {

const char* variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

bool flag(const char* name, bool fallback) {
  const char* value = variable(name);
  return value == nullptr ? fallback : std::strcmp(value, "0") != 0;
}

ThreadOrder order_from_environment() {
  const char* value = variable("CUDA_EMU_ORDER");
  if (value == nullptr || std::strcmp(value, "forward") == 0) return ThreadOrder::forward;
  if (std::strcmp(value, "reverse") == 0) return ThreadOrder::reverse;
  if (std::strcmp(value, "random") == 0) return ThreadOrder::random;
  if (std::strcmp(value, "warp-ahead") == 0) return ThreadOrder::warp_ahead;
  fatal("CUDA_EMU_ORDER=%s: expected forward, reverse, random or warp-ahead", value);
}

Settings from_environment() {
  Settings s;
  s.order = order_from_environment();
  s.deferred = flag("CUDA_EMU_DEFERRED", false);
  s.poison = flag("CUDA_EMU_POISON", true);
  s.trace = flag("CUDA_EMU_TRACE", false);
  if (const char* log = variable("CUDA_EMU_LAUNCH_LOG")) s.launch_log = log;
  return s;
}

}  // namespace

const Settings& settings() {
  static const Settings loaded = from_environment();
  return loaded;
}

}  // namespace cuda_emu
