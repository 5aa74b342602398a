#include "geotrain/model/init.hpp"

#include <cmath>

namespace geotrain::model {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void fill_initial_values(const ParameterView& view, const ModelShape& config, std::uint64_t seed, float* out) {
  const bool norm = view.name.find(".ln1.") != std::string::npos ||
                    view.name.find(".ln2.") != std::string::npos || view.name.rfind("lnf.", 0) == 0;
  if (ends_with(view.name, ".bias")) {
    for (std::size_t i = 0; i < view.count; ++i) out[i] = 0.0f;
    return;
  }
  if (norm) {
    for (std::size_t i = 0; i < view.count; ++i) out[i] = 1.0f;
    return;
  }
  double std_dev = 0.02;
  if (ends_with(view.name, "attn.proj.weight") || ends_with(view.name, "mlp.proj.weight")) {
    std_dev /= std::sqrt(2.0 * config.layers);
  }
  std::uint64_t state = seed;
  for (char c : view.name) state = mix(state ^ static_cast<unsigned char>(c));
  // Box-Muller on 53-bit uniforms from a splitmix64 stream.
  auto uniform = [&state] { return ((state = mix(state)) >> 11) * 0x1.0p-53; };
  for (std::size_t i = 0; i < view.count; i += 2) {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * M_PI * u2;
    out[i] = static_cast<float>(std_dev * radius * std::cos(angle));
    if (i + 1 < view.count) out[i + 1] = static_cast<float>(std_dev * radius * std::sin(angle));
  }
}

}  // namespace geotrain::model
