#include "geotrain/plan/plan_codec.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "geotrain/common/errors.hpp"

namespace geotrain::plan {

namespace {

constexpr char kMagic[8] = {'G', 'T', 'R', 'N', 'P', 'L', 'A', 'N'};
constexpr std::size_t kHeaderBytes = 32;
constexpr std::int64_t kMaxDevices = 1 << 24;

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
std::uint32_t get_u32(std::span<const std::uint8_t> in, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(in[at + i]) << (8 * i);
  return v;
}
std::uint64_t get_u64(std::span<const std::uint8_t> in, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(in[at + i]) << (8 * i);
  return v;
}

[[noreturn]] void reject(const std::string& what) {
  throw InputError("plan message: " + what);
}

double checked_cost(std::span<const std::uint8_t> in, std::size_t at, const std::string& name) {
  const double v = std::bit_cast<double>(get_u64(in, at));
  if (std::isnan(v) || v < 0) reject(name + " must be >= 0, got " + std::to_string(v));
  return v;
}

// The header's counts (widened, so that their products cannot overflow).
struct Header {
  std::int64_t pipeline_stages, data_parallel, boundaries, tensor_parallel, groups;
};

// The magic, the version and the counts, each within its limits and
// consistent with the others.
Header read_header(std::span<const std::uint8_t> in) {
  if (in.size() < kHeaderBytes) {
    reject("truncated: " + std::to_string(in.size()) + " bytes, the header alone has " +
           std::to_string(kHeaderBytes));
  }
  if (std::memcmp(in.data(), kMagic, 8) != 0) reject("bad magic (not a geotrain plan)");
  const std::uint32_t version = get_u32(in, 8);
  if (version != kPlanCodecVersion) {
    reject("version " + std::to_string(version) + ", this build reads " + std::to_string(kPlanCodecVersion));
  }
  const std::int64_t pp = get_u32(in, 12), dp = get_u32(in, 16), boundaries = get_u32(in, 20);
  const std::int64_t t = get_u32(in, 24), groups = get_u32(in, 28);
  if (pp < 1 || dp < 1 || pp > kMaxDevices || dp > kMaxDevices || pp * dp > kMaxDevices) {
    reject("sizes pp = " + std::to_string(pp) + ", dp = " + std::to_string(dp) + " out of range");
  }
  if (t < 1 || t > kMaxDevices || pp * dp * t > kMaxDevices) {
    reject("tensor_parallel = " + std::to_string(t) + " out of range (>= 1, pp * dp * tensor_parallel <= " +
           std::to_string(kMaxDevices) + ")");
  }
  if (t == 1 && groups != 0) {
    reject("tensor_groups: " + std::to_string(groups) + " groups with tensor_parallel = 1 (expected none)");
  }
  if (t > 1 && (groups < 1 || groups > kMaxDevices || groups * t > kMaxDevices)) {
    reject("tensor_groups: group count " + std::to_string(groups) + " out of range for tensor_parallel = " +
           std::to_string(t));
  }
  if (boundaries != 0 && boundaries != pp - 1) {
    reject("boundary count " + std::to_string(boundaries) + ", expected 0 or pp - 1 = " + std::to_string(pp - 1));
  }
  return {pp, dp, boundaries, t, groups};
}

// The message is exactly as long as its header says, and its last 8 bytes
// are the checksum of the others.
void check_length_and_checksum(std::span<const std::uint8_t> in, const Header& header) {
  const std::size_t entries = static_cast<std::size_t>(header.pipeline_stages * header.data_parallel);
  const std::size_t group_entries = static_cast<std::size_t>(header.groups * header.tensor_parallel);
  const std::size_t expected_size =
      kHeaderBytes + 4 * entries + 4 * group_entries + 8 * static_cast<std::size_t>(header.boundaries) + 16 + 8;
  if (in.size() != expected_size) {
    reject("length " + std::to_string(in.size()) + " bytes, the header implies " + std::to_string(expected_size));
  }
  const std::uint64_t stored = get_u64(in, expected_size - 8);
  if (stored != plan_checksum(in.first(expected_size - 8))) reject("checksum mismatch (corrupted in transit)");
}

// plan.stages from offset `at` (advanced past them): device ids (t == 1)
// or unit ids below the group count (t > 1), each used once.
void read_stages(std::span<const std::uint8_t> in, const Header& header, std::size_t device_ids, std::size_t& at,
                 Plan& plan) {
  const bool whole_devices = header.tensor_parallel == 1;
  const std::size_t stage_ids = whole_devices ? device_ids : static_cast<std::size_t>(header.groups);
  const std::string what = whole_devices ? "device" : "unit";
  plan.stages.assign(header.pipeline_stages, std::vector<int>(header.data_parallel));
  std::vector<char> seen(stage_ids, 0);
  for (std::int64_t s = 0; s < header.pipeline_stages; ++s) {
    for (std::int64_t r = 0; r < header.data_parallel; ++r, at += 4) {
      const std::uint32_t id = get_u32(in, at);
      const std::string where = "stages[" + std::to_string(s) + "][" + std::to_string(r) + "]";
      if (id >= stage_ids) {
        reject(where + " = " + std::to_string(id) + " is not a " + what + " id < " + std::to_string(stage_ids) +
               (whole_devices ? "" : " (the number of tensor groups)"));
      }
      if (seen[id]) reject(where + ": " + what + " " + std::to_string(id) + " appears twice");
      seen[id] = 1;
      plan.stages[s][r] = static_cast<int>(id);
    }
  }
}

// plan.tensor_groups from offset `at` (advanced past them): t device ids
// each, no device in two groups.
void read_tensor_groups(std::span<const std::uint8_t> in, const Header& header, std::size_t device_ids,
                        std::size_t& at, Plan& plan) {
  const std::int64_t t = header.tensor_parallel;
  std::vector<char> in_group(t == 1 ? 0 : device_ids, 0);
  for (std::int64_t u = 0; u < header.groups; ++u) {
    std::vector<int> group(t);
    for (std::int64_t i = 0; i < t; ++i, at += 4) {
      const std::uint32_t device = get_u32(in, at);
      const std::string where = "tensor_groups[" + std::to_string(u) + "][" + std::to_string(i) + "]";
      if (device >= device_ids) {
        reject(where + " = " + std::to_string(device) + " is not a device id < " + std::to_string(device_ids));
      }
      if (in_group[device]) reject(where + ": device " + std::to_string(device) + " is in two tensor groups");
      in_group[device] = 1;
      group[i] = static_cast<int>(device);
    }
    plan.tensor_groups.push_back(std::move(group));
  }
}

}  // namespace

std::uint64_t plan_checksum(std::span<const std::uint8_t> bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::uint8_t b : bytes) {
    h ^= b;
    h *= 1099511628211ull;
  }
  // splitmix64 finaliser: a bijection, so distinct FNV states stay distinct.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

std::vector<std::uint8_t> encode_plan(const Plan& plan) {
  const int pp = plan.pipeline_stages, dp = plan.data_parallel;
  if (pp < 1 || dp < 1 || static_cast<int>(plan.stages.size()) != pp) {
    throw InputError("encode_plan: plan has " + std::to_string(plan.stages.size()) +
                     " stages for pp = " + std::to_string(pp) + ", dp = " + std::to_string(dp));
  }
  const int t = plan.tensor_parallel;
  if (t < 1 || (t == 1 && !plan.tensor_groups.empty()) || (t > 1 && plan.tensor_groups.empty())) {
    throw InputError("encode_plan: tensor_parallel = " + std::to_string(t) + " with " +
                     std::to_string(plan.tensor_groups.size()) +
                     " tensor groups (t == 1: none; t > 1: at least one)");
  }
  for (const auto& group : plan.tensor_groups) {
    if (static_cast<int>(group.size()) != t) {
      throw InputError("encode_plan: a tensor group has " + std::to_string(group.size()) +
                       " devices, expected tensor_parallel = " + std::to_string(t));
    }
  }
  std::vector<std::uint8_t> out(kMagic, kMagic + 8);
  put_u32(out, kPlanCodecVersion);
  put_u32(out, static_cast<std::uint32_t>(pp));
  put_u32(out, static_cast<std::uint32_t>(dp));
  put_u32(out, static_cast<std::uint32_t>(plan.boundary_s.size()));
  put_u32(out, static_cast<std::uint32_t>(t));
  put_u32(out, static_cast<std::uint32_t>(plan.tensor_groups.size()));
  for (const auto& stage : plan.stages) {
    if (static_cast<int>(stage.size()) != dp) {
      throw InputError("encode_plan: a stage has " + std::to_string(stage.size()) +
                       " devices, expected dp = " + std::to_string(dp));
    }
    for (int device : stage) put_u32(out, static_cast<std::uint32_t>(device));
  }
  for (const auto& group : plan.tensor_groups) {
    for (int device : group) put_u32(out, static_cast<std::uint32_t>(device));
  }
  for (double b : plan.boundary_s) put_u64(out, std::bit_cast<std::uint64_t>(b));
  put_u64(out, std::bit_cast<std::uint64_t>(plan.cost.datap_s));
  put_u64(out, std::bit_cast<std::uint64_t>(plan.cost.pipeline_s));
  put_u64(out, plan_checksum(out));
  return out;
}

Plan decode_plan(std::span<const std::uint8_t> in, int expected_devices) {
  const Header header = read_header(in);
  check_length_and_checksum(in, header);
  // A layout may leave devices idle (pp * dp * t < ranks), never use more.
  const std::int64_t pp = header.pipeline_stages, dp = header.data_parallel, t = header.tensor_parallel;
  const std::int64_t used = pp * dp * t;
  if (expected_devices >= 0 && used > expected_devices) {
    reject((t == 1 ? "pp * dp = " + std::to_string(pp) + " * " + std::to_string(dp)
                   : "pp * dp * tensor_parallel = " + std::to_string(pp) + " * " + std::to_string(dp) + " * " +
                         std::to_string(t)) +
           " = " + std::to_string(used) + ", but there are only " + std::to_string(expected_devices) + " ranks");
  }
  const std::size_t device_ids =
      expected_devices >= 0 ? static_cast<std::size_t>(expected_devices) : static_cast<std::size_t>(used);

  Plan plan;
  plan.pipeline_stages = static_cast<int>(pp);
  plan.data_parallel = static_cast<int>(dp);
  plan.tensor_parallel = static_cast<int>(t);
  std::size_t at = kHeaderBytes;
  read_stages(in, header, device_ids, at, plan);
  read_tensor_groups(in, header, device_ids, at, plan);
  for (std::int64_t b = 0; b < header.boundaries; ++b, at += 8) {
    plan.boundary_s.push_back(checked_cost(in, at, "boundary_s[" + std::to_string(b) + "]"));
  }
  plan.cost.datap_s = checked_cost(in, at, "cost.datap_s");
  plan.cost.pipeline_s = checked_cost(in, at + 8, "cost.pipeline_s");
  return plan;
}

}  // namespace geotrain::plan
