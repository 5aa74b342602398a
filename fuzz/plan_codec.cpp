// The plan message (plan/plan_codec.hpp): decode_plan on the input, and on
// the input with its last 8 bytes replaced by the right checksum, so that
// the fuzzer also reaches the checks behind the checksum. Invariants of an
// accepted message:
//  - a valid plan: pp, dp, t >= 1; t == 1: every device 0 .. pp*dp-1
//    exactly once; t > 1: every unit below the group count at most once,
//    groups of t devices below pp*dp*t, none in two groups; 0 or pp - 1
//    boundaries, no cost NaN or negative;
//  - the encoding is canonical: encode_plan(decoded) gives the same bytes;
//  - the device-count check holds: pp*dp*t is accepted, pp*dp*t + 1 too
//    (an idle rank), pp*dp*t - 1 is not;
//  - a single corrupted byte is rejected (sampled positions).
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/plan/plan_codec.hpp"

namespace {

using geotrain::plan::Plan;

bool decodes(std::span<const std::uint8_t> bytes, int expected_devices) {
  try {
    geotrain::plan::decode_plan(bytes, expected_devices);
    return true;
  } catch (const geotrain::InputError&) {
    return false;
  }
}

// Every row holds `width` entries below `count`, and no entry is in two rows
// (or twice in one).
void check_disjoint_rows(const std::vector<std::vector<int>>& rows, int width, std::size_t count,
                         const char* width_what, const std::string& entry_what) {
  std::vector<char> seen(count, 0);
  for (const auto& row : rows) {
    FUZZ_CHECK(row.size() == static_cast<std::size_t>(width), width_what);
    for (int entry : row) {
      FUZZ_CHECK(entry >= 0 && static_cast<std::size_t>(entry) < count && !seen[entry], entry_what + std::to_string(entry));
      seen[entry] = 1;
    }
  }
}

void check_plan(const Plan& plan) {
  const int pp = plan.pipeline_stages, dp = plan.data_parallel, t = plan.tensor_parallel;
  FUZZ_CHECK(pp >= 1 && dp >= 1 && t >= 1, "degrees");
  FUZZ_CHECK(plan.stages.size() == static_cast<std::size_t>(pp), "stage count");
  FUZZ_CHECK((t == 1) == plan.tensor_groups.empty(), "tensor groups present iff t > 1");
  check_disjoint_rows(plan.tensor_groups, t, static_cast<std::size_t>(pp) * dp * t, "group size", "group device ");
  check_disjoint_rows(plan.stages, dp, t == 1 ? static_cast<std::size_t>(pp) * dp : plan.tensor_groups.size(),
                      "stage width", "device ");
  FUZZ_CHECK(plan.boundary_s.empty() || plan.boundary_s.size() == static_cast<std::size_t>(pp - 1), "boundaries");
  for (double cost : plan.boundary_s) FUZZ_CHECK(!std::isnan(cost) && cost >= 0, "boundary cost");
  FUZZ_CHECK(!std::isnan(plan.cost.datap_s) && plan.cost.datap_s >= 0, "datap_s");
  FUZZ_CHECK(!std::isnan(plan.cost.pipeline_s) && plan.cost.pipeline_s >= 0, "pipeline_s");
}

void check_message(std::span<const std::uint8_t> bytes) {
  Plan plan;
  try {
    plan = geotrain::plan::decode_plan(bytes);
  } catch (const geotrain::InputError&) {
    return;
  }
  check_plan(plan);
  const std::vector<std::uint8_t> encoded = geotrain::plan::encode_plan(plan);
  FUZZ_CHECK(std::equal(encoded.begin(), encoded.end(), bytes.begin(), bytes.end()), "encoding not canonical");
  const int devices = plan.pipeline_stages * plan.data_parallel * plan.tensor_parallel;
  FUZZ_CHECK(decodes(bytes, devices), "rejected for its own device count");
  // A layout may leave ranks idle: more ranks than pp x dp are fine, fewer never.
  FUZZ_CHECK(decodes(bytes, devices + 1), "rejected for a job with an idle rank");
  FUZZ_CHECK(devices == 1 || !decodes(bytes, devices - 1), "accepted for fewer ranks than it uses");

  std::vector<std::uint8_t> damaged(bytes.begin(), bytes.end());
  const std::uint64_t sampler = geotrain::plan::plan_checksum(bytes);
  for (int k = 0; k < 4; ++k) {
    const std::size_t at = (sampler >> (16 * k)) % damaged.size();
    const std::uint8_t flip = static_cast<std::uint8_t>(1u << ((sampler >> (16 * k + 13)) & 7));
    damaged[at] ^= flip;
    FUZZ_CHECK(!decodes(damaged, -1), "byte " + std::to_string(at) + " corrupted and still accepted");
    damaged[at] ^= flip;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  check_message(bytes);
  if (size >= 8) {
    std::vector<std::uint8_t> repaired(bytes.begin(), bytes.end());
    const std::uint64_t checksum = geotrain::plan::plan_checksum(bytes.first(size - 8));
    for (int i = 0; i < 8; ++i) repaired[size - 8 + i] = static_cast<std::uint8_t>(checksum >> (8 * i));
    check_message(repaired);
  }
  return 0;
}
