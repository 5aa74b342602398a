// A Plan on the wire: what rank 0 broadcasts after planning. The encoding is
// fixed little-endian, independent of the host:
//
//   offset  size        field
//   0       8           magic "GTRNPLAN"
//   8       4           version (kPlanCodecVersion)
//   12      4           pipeline_stages  (pp >= 1)
//   16      4           data_parallel    (dp >= 1)
//   20      4           boundary count   (0 or pp - 1)
//   24      4           tensor_parallel  (t >= 1)
//   28      4           group count G    (0 when t == 1, else >= 1)
//   32      4*pp*dp     stages[s][r], stage-major: device ids (t == 1) or unit ids (t > 1)
//   ...     4*G*t       tensor_groups[u][i], unit-major, device ids
//   ...     8*count     boundary_s (IEEE-754 bits)
//   ...     16          cost.datap_s, cost.pipeline_s
//   ...     8           checksum of every byte before it
//
// Version history: 1 had no tensor_parallel, group count or groups (header
// of 24 bytes); 2 added them.
//
// decode_plan trusts nothing: it checks the length, magic, version, sizes,
// the checksum, pp*dp*t against the expected device count, that every stage
// entry appears exactly once and is a device id (t == 1) or a unit id below
// G (t > 1), that every group has t device ids below the device count and no
// device is in two groups, and that costs are not NaN or negative. Any
// single corrupted byte is rejected (the checksum is FNV-1a, whose per-byte
// step is a bijection, followed by a bijective mixer).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "geotrain/plan/plan.hpp"

namespace geotrain::plan {

constexpr std::uint32_t kPlanCodecVersion = 2;

std::vector<std::uint8_t> encode_plan(const Plan& plan);

// Throws InputError with a message naming the first bad field.
// `expected_devices` >= 0: the job's ranks; device ids must be below it and
// pp*dp*t at most it (a layout may leave ranks idle). < 0: exactly pp*dp*t
// devices (ids below pp*dp*t).
Plan decode_plan(std::span<const std::uint8_t> bytes, int expected_devices = -1);

// 64-bit checksum used by the encoding (FNV-1a + mixer).
std::uint64_t plan_checksum(std::span<const std::uint8_t> bytes);

}  // namespace geotrain::plan
