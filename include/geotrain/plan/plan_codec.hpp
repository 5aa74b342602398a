// A Plan on the wire: what rank 0 broadcasts after planning. The encoding is
// fixed little-endian, independent of the host:
//
//   offset  size        field
//   0       8           magic "GTRNPLAN"
//   8       4           version (kPlanCodecVersion)
//   12      4           pipeline_stages  (pp >= 1)
//   16      4           data_parallel    (dp >= 1)
//   20      4           boundary count   (0 or pp - 1)
//   24      4*pp*dp     stages[s][r], stage-major, device ids
//   ...     8*count     boundary_s (IEEE-754 bits)
//   ...     16          cost.datap_s, cost.pipeline_s
//   ...     8           checksum of every byte before it
//
// decode_plan trusts nothing: it checks the length, magic, version, sizes,
// the checksum, pp*dp against the expected device count, that every device
// appears exactly once, and that costs are not NaN or negative. Any single
// corrupted byte is rejected (the checksum is FNV-1a, whose per-byte step is
// a bijection, followed by a bijective mixer).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "geotrain/plan/plan.hpp"

namespace geotrain::plan {

constexpr std::uint32_t kPlanCodecVersion = 1;

std::vector<std::uint8_t> encode_plan(const Plan& plan);

// Throws std::invalid_argument with a message naming the first bad field.
// `expected_devices` >= 0: the job's ranks; device ids must be below it and
// pp*dp at most it (a layout may leave ranks idle). < 0: exactly pp*dp devices.
Plan decode_plan(std::span<const std::uint8_t> bytes, int expected_devices = -1);

// 64-bit checksum used by the encoding (FNV-1a + mixer).
std::uint64_t plan_checksum(std::span<const std::uint8_t> bytes);

}  // namespace geotrain::plan
