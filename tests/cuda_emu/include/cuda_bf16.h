// The CUDA emulation's __nv_bfloat16: storage and the round-to-nearest-even
// conversions, the only parts the kernels use.
#pragma once
#include <cstdint>
#include <cstring>

#include "cuda_emu.hpp"

struct __nv_bfloat16 {
  unsigned short __x;
};

inline __nv_bfloat16 __float2bfloat16_rn(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  __nv_bfloat16 out;
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // a NaN stays a quiet NaN rather than rounding to infinity
    out.__x = static_cast<unsigned short>((bits >> 16) | 0x40u);
    return out;
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  out.__x = static_cast<unsigned short>(bits >> 16);
  return out;
}

inline float __bfloat162float(__nv_bfloat16 value) {
  const std::uint32_t bits = static_cast<std::uint32_t>(value.__x) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}
