// The run configuration (io/config.hpp): a TOML file, then --key=value
// overrides. Input: the file's text; lines after a line "#--overrides--" are
// the overrides instead. Invariants of an accepted configuration:
//  - it satisfies every documented check (re-stated here, independently);
//  - describe() is a faithful listing: each "key = value" line given back as
//    an override onto the defaults is accepted and describes the same config.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "geotrain/io/config.hpp"
#include "geotrain/common/errors.hpp"

namespace {

using geotrain::fuzz::invariant_failed;
using geotrain::fuzz::ScratchFile;
using geotrain::io::Config;

constexpr std::string_view kOverridesMarker = "#--overrides--\n";

struct Split {
  std::string_view file;
  std::vector<std::string> overrides;
};

Split split_input(std::string_view input) {
  Split split{input, {}};
  const std::size_t marker = input.find(kOverridesMarker);
  if (marker == std::string_view::npos) return split;
  split.file = input.substr(0, marker);
  std::string_view rest = input.substr(marker + kOverridesMarker.size());
  while (!rest.empty() && split.overrides.size() < 64) {
    const std::size_t end = rest.find('\n');
    split.overrides.emplace_back(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  }
  return split;
}

bool one_of(const std::string& value, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed) {
    if (value == a) return true;
  }
  return false;
}

void check_documented_rules(const Config& c) {
  const std::string d = geotrain::io::describe(c);
  for (int v : {c.train.steps, c.train.micro_batch_sequences, c.train.gradient_accumulation, c.train.eval_batches, c.train.log_every_steps,
                c.pipeline.stages, c.pipeline.plan_candidates, c.network.probe_bytes, c.checkpoint.keep}) {
    FUZZ_CHECK(v > 0, d);
  }
  for (int v : {c.train.eval_every_steps, c.checkpoint.every_steps, c.timing.max_event_steps, c.optimizer.warmup_steps}) {
    FUZZ_CHECK(v >= 0, d);
  }
  FUZZ_CHECK(c.train.gradient_accumulation <= 16000, d);
  FUZZ_CHECK(c.optimizer.warmup_steps <= c.train.steps, d);
  FUZZ_CHECK(one_of(to_string(c.device.kind), {"auto", "cpu", "cuda"}), d);
  FUZZ_CHECK(one_of(to_string(c.device.matmul_precision), {"fp32", "bf16"}), d);
  FUZZ_CHECK(one_of(to_string(c.network.transport), {"auto", "mpi", "nccl"}), d);
  FUZZ_CHECK(!(c.network.transport == geotrain::Transport::nccl && c.device.kind == geotrain::DeviceRequest::cpu), d);
  FUZZ_CHECK(one_of(geotrain::plan::to_string(c.pipeline.schedule), {"1f1b", "gpipe"}), d);
  FUZZ_CHECK(one_of(geotrain::plan::to_string(c.pipeline.placement), {"planned", "rank-order", "dtfm-rank-order", "random"}), d);
  FUZZ_CHECK(c.pipeline.layers_per_stage.empty() || static_cast<int>(c.pipeline.layers_per_stage.size()) == c.pipeline.stages, d);
  for (int layers : c.pipeline.layers_per_stage) FUZZ_CHECK(layers >= 1, d);
  FUZZ_CHECK(!(c.checkpoint.resume == "auto" && c.checkpoint.dir.empty()), d);
  for (double v : {c.optimizer.learning_rate, c.optimizer.min_learning_rate_fraction, c.optimizer.beta1, c.optimizer.beta2, c.optimizer.epsilon, c.optimizer.weight_decay,
                   c.optimizer.gradient_clip, c.device.peak_tflops, c.network.deadline_s}) {
    FUZZ_CHECK(std::isfinite(v) && v >= 0, d);
  }
  FUZZ_CHECK(c.optimizer.learning_rate >= 1e-12 && c.optimizer.beta1 < 1 && c.optimizer.beta2 < 1 && c.optimizer.epsilon > 0, d);
  FUZZ_CHECK(c.network.deadline_s >= 0.01, d);
}

// describe() prints strings between quotes without escaping (it is a
// listing for logs); a value with a quote, a backslash or a control
// character cannot come back through TOML, so those configs skip the check.
bool listing_is_toml(const std::string& listing) {
  for (unsigned char ch : listing) {
    if (ch == '\\' || (ch < 0x20 && ch != '\n') || ch == 0x7f) return false;
  }
  std::size_t line_start = 0;
  while (line_start < listing.size()) {
    const std::size_t line_end = listing.find('\n', line_start);
    const std::string_view line(listing.data() + line_start, line_end - line_start);
    const std::size_t first_quote = line.find('"');
    if (first_quote != std::string_view::npos && line.find('"', first_quote + 1) != line.size() - 1) return false;
    line_start = line_end + 1;
  }
  return true;
}

// "-0" lists as an integer and comes back as 0: the same number.
std::string without_negative_zeros(std::string listing) {
  for (std::size_t at = listing.find(" = -0\n"); at != std::string::npos; at = listing.find(" = -0\n", at)) {
    listing.erase(at + 3, 1);
  }
  return listing;
}

// Default paths are relative to the working directory, and so are paths
// given as overrides, which resolve them on the spot: the same files.
Config with_resolved_paths(Config c) {
  for (std::string* path : {&c.model.file, &c.data.train, &c.data.validation, &c.network.matrix}) {
    if (!path->empty() && std::filesystem::path(*path).is_relative()) {
      *path = (std::filesystem::current_path() / *path).lexically_normal().string();
    }
  }
  return c;
}

void check_listing_round_trip(const Config& c) {
  const std::string listing = geotrain::io::describe(with_resolved_paths(c));
  if (!listing_is_toml(listing)) return;
  std::vector<std::string> overrides;
  std::size_t line_start = 0;
  while (line_start < listing.size()) {
    const std::size_t line_end = listing.find('\n', line_start);
    const std::string line = listing.substr(line_start, line_end - line_start);
    const std::size_t eq = line.find(" = ");
    FUZZ_CHECK(eq != std::string::npos, line);
    overrides.push_back("--" + line.substr(0, eq) + "=" + line.substr(eq + 3));
    line_start = line_end + 1;
  }
  Config again;
  try {
    again = geotrain::io::default_config(overrides);
  } catch (const geotrain::InputError& e) {
    invariant_failed("listing re-applies", std::string(e.what()) + "\nlisting:\n" + listing, __FILE__, __LINE__);
  }
  const std::string listed_again = without_negative_zeros(geotrain::io::describe(again));
  FUZZ_CHECK(listed_again == without_negative_zeros(listing), listing + "\nversus\n" + listed_again);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Split input = split_input(std::string_view(reinterpret_cast<const char*>(data), size));
  const ScratchFile file(input.file);
  Config config;
  try {
    config = geotrain::io::load_config(file.path(), input.overrides);
  } catch (const geotrain::InputError&) {
    return 0;
  }
  check_documented_rules(config);
  check_listing_round_trip(config);
  return 0;
}
