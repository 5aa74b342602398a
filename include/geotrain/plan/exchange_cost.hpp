// An exchange's time as a function of the bytes each member sums, built once
// per group and read at every size: a layout search prices the same group's
// sum for every split, flush and micro-batch of a placement.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "geotrain/plan/exchange_pattern.hpp"

namespace geotrain::plan {

// Every transfer of an exchange's phases grows with the bytes b, so each
// resource a phase crosses takes b x (its load per byte / its capacity) +
// its smallest latency (the fluid bound, flow_sharing.hpp), and the phase
// as long as its slowest resource. Kept per phase: the lines above all
// others at some b >= 0, a few where a direct sum over 1,000 members
// crosses a million resources.
class ExchangeCost {
 public:
  // phases: of one byte per member; none may be a pipelined chain (central).
  ExchangeCost(const Network& network, const std::vector<ExchangePhase>& phases);
  double seconds(double bytes) const;  // phases_s of the phases of `bytes`
  double bytes_s(double bytes) const;  // the same without latencies
  double latency_s() const;            // phases_latency_s

 private:
  struct Line {
    double per_byte = 0, latency = 0;
  };
  struct Phase {
    int repeat = 1;
    std::vector<Line> lines;  // per_byte ascending, latency descending: none under another everywhere
  };
  static void keep(std::vector<Line>* lines, Line line);
  std::vector<Phase> phases_;
};

// The ExchangeCosts of (members, scheme) met so far on one network; safe to
// share between threads. Forgets everything past `capacity` groups.
class ExchangeCostCache {
 public:
  explicit ExchangeCostCache(std::size_t capacity = 2048) : capacity_(capacity) {}
  // Direct, ring and hierarchical only (central and paper are not priced
  // by the fluid bound of phases).
  std::shared_ptr<const ExchangeCost> get(const Network& network, const std::vector<int>& members,
                                          DataParallelScheme scheme);

 private:
  std::size_t capacity_;
  std::mutex mutex_;
  std::map<std::pair<DataParallelScheme, std::vector<int>>, std::shared_ptr<const ExchangeCost>> costs_;
};

}  // namespace geotrain::plan
