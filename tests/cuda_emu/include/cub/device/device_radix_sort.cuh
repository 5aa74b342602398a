// The CUDA emulation's cub::DeviceRadixSort::SortPairs: a stable sort on the
// host in CUB's order (keys compared as radix digits, bits [begin_bit, end_bit)).
#pragma once
#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

#include "../../cuda_emu.hpp"

namespace cub {
struct DeviceRadixSort {
  template <class K, class V, class NumItems>
  static cudaError_t SortPairs(void* temp, std::size_t& temp_bytes, const K* keys_in, K* keys_out,
                               const V* values_in, V* values_out, NumItems num_items, int begin_bit = 0,
                               int end_bit = sizeof(K) * 8, cudaStream_t stream = nullptr, bool = false) {
    static_assert(std::is_integral_v<K>, "the CUDA emulation sorts integer keys only");
    const std::size_t n = static_cast<std::size_t>(num_items);
    const std::size_t needed = 256 + n * (sizeof(K) + sizeof(V));  // what a real call might ask for
    if (temp == nullptr) {
      temp_bytes = needed;
      return cudaSuccess;
    }
    if (temp_bytes < needed || begin_bit < 0 || end_bit > static_cast<int>(sizeof(K) * 8) || begin_bit >= end_bit) {
      return cudaErrorInvalidValue;
    }
    if (n == 0) return cudaSuccess;
    for (const void* p : {static_cast<const void*>(keys_in), static_cast<const void*>(keys_out),
                          static_cast<const void*>(values_in), static_cast<const void*>(values_out), static_cast<const void*>(temp)}) {
      if (!cuda_emu::is_device_range(p, 0)) cuda_emu::fatal("cub::DeviceRadixSort::SortPairs: %p is not device memory", p);
    }
    if (!cuda_emu::is_device_range(keys_in, n * sizeof(K)) || !cuda_emu::is_device_range(keys_out, n * sizeof(K)) ||
        !cuda_emu::is_device_range(values_in, n * sizeof(V)) || !cuda_emu::is_device_range(values_out, n * sizeof(V)) ||
        !cuda_emu::is_device_range(temp, temp_bytes)) {
      cuda_emu::fatal("cub::DeviceRadixSort::SortPairs: a buffer is smaller than num_items (%zu)", n);
    }
    cuda_emu::enqueue(stream, [=] {
      using U = std::make_unsigned_t<K>;
      const auto digit = [&](K key) {
        U u = static_cast<U>(key);
        if constexpr (std::is_signed_v<K>) u ^= U(1) << (sizeof(K) * 8 - 1);  // CUB's twiddle
        const int bits = end_bit - begin_bit;
        const U field = bits >= static_cast<int>(sizeof(U) * 8) ? ~U(0) : static_cast<U>((U(1) << bits) - 1);
        return static_cast<U>((u >> begin_bit) & field);
      };
      std::vector<std::size_t> order(n);
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return digit(keys_in[a]) < digit(keys_in[b]); });
      std::vector<K> keys(n);
      std::vector<V> values(n);
      for (std::size_t i = 0; i < n; ++i) {
        keys[i] = keys_in[order[i]];
        values[i] = values_in[order[i]];
      }
      std::memcpy(keys_out, keys.data(), n * sizeof(K));
      std::memcpy(values_out, values.data(), n * sizeof(V));
    });
    return cudaSuccess;
  }
};
}  // namespace cub
