// The run's closed choices besides the planner's (plan::Schedule,
// plan::Placement): typed once when the config is read, never compared as
// text afterwards. parse_* return false for an unknown name.
#pragma once
#include <initializer_list>
#include <string>

namespace geotrain {

enum class DeviceRequest { automatic, cpu, cuda };  // device.kind: auto picks CUDA where usable
enum class Transport { automatic, mpi, nccl };      // network.transport: auto = NCCL on GPUs where built
// Precision of matmul/attention inputs to the math units. The master
// weights, optimizer state, layernorm and softmax statistics are always
// fp32; bf16 rounds the GEMM operands (CUDA: bf16 tensor cores with fp32
// accumulation; CPU: emulated by rounding, for parity tests only).
enum class MatmulPrecision { fp32, bf16 };

inline std::string to_string(DeviceRequest d) {
  return d == DeviceRequest::cpu ? "cpu" : d == DeviceRequest::cuda ? "cuda" : "auto";
}
inline std::string to_string(Transport t) { return t == Transport::mpi ? "mpi" : t == Transport::nccl ? "nccl" : "auto"; }
inline std::string to_string(MatmulPrecision p) { return p == MatmulPrecision::bf16 ? "bf16" : "fp32"; }

template <class Choice>
bool parse_choice(const std::string& text, Choice* out, std::initializer_list<Choice> choices) {
  for (Choice c : choices) {
    if (to_string(c) == text) return *out = c, true;
  }
  return false;
}
inline bool parse_device_request(const std::string& text, DeviceRequest* out) {
  return parse_choice(text, out, {DeviceRequest::automatic, DeviceRequest::cpu, DeviceRequest::cuda});
}
inline bool parse_transport(const std::string& text, Transport* out) {
  return parse_choice(text, out, {Transport::automatic, Transport::mpi, Transport::nccl});
}
inline bool parse_matmul_precision(const std::string& text, MatmulPrecision* out) {
  return parse_choice(text, out, {MatmulPrecision::fp32, MatmulPrecision::bf16});
}

}  // namespace geotrain
