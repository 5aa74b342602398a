// Pieces shared by the search, its local searches and its seeds.
#pragma once
#include <cstdint>
#include <vector>

#include "geotrain/plan/cost_model.hpp"

namespace geotrain::plan {

// xoshiro256** seeded by splitmix64: identical streams on every platform
// (std::uniform_int_distribution is not specified bit-for-bit).
class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  std::uint64_t next();
  int below(int bound);  // uniform in [0, bound)
  template <class T>
  void shuffle(std::vector<T>& items) {
    for (int i = static_cast<int>(items.size()) - 1; i > 0; --i) std::swap(items[i], items[below(i + 1)]);
  }

 private:
  std::uint64_t state_[4];
};

// Bottleneck values of group pairs, remembered by the pair's member sets.
// Offspring share most groups with their parents and local-search moves
// revisit the same pairs, so most lookups hit. A group's key is the XOR of
// its members' random 64-bit keys (Zobrist hashing): order-independent and
// updated in O(1) when one member is exchanged. A key collision could only
// mislead the search; the reported plan is always recomputed exactly.
class GroupPairCache {
 public:
  GroupPairCache(const CostModel& model, std::uint64_t seed);
  std::uint64_t device_key(int device) const { return device_keys_[device]; }
  std::uint64_t group_key(const int* members, int count) const;
  // member_a(i), member_b(j): the i-th / j-th device of either group.
  template <class MemberA, class MemberB>
  double bottleneck(std::uint64_t key_a, MemberA member_a, std::uint64_t key_b, MemberB member_b);
  double bottleneck(const int* a, const int* b) {
    const int d = model_.group_size();
    return bottleneck(group_key(a, d), [a](int i) { return a[i]; }, group_key(b, d), [b](int j) { return b[j]; });
  }

 private:
  double compute(const std::vector<int>& a, const std::vector<int>& b);
  const CostModel& model_;
  std::vector<std::uint64_t> device_keys_;
  struct Slot {
    std::uint64_t key = 0;
    double value = 0;
    bool filled = false;
  };
  std::vector<Slot> slots_;  // power-of-two size
  std::vector<int> members_a_, members_b_;
  std::vector<double> block_;
};

template <class MemberA, class MemberB>
double GroupPairCache::bottleneck(std::uint64_t key_a, MemberA member_a, std::uint64_t key_b, MemberB member_b) {
  const std::uint64_t lo = key_a < key_b ? key_a : key_b, hi = key_a < key_b ? key_b : key_a;
  const std::uint64_t key = (lo * 0x9e3779b97f4a7c15ull) ^ (hi + 0x632be59bd9b4e019ull + (lo << 6) + (lo >> 2));
  Slot& slot = slots_[key & (slots_.size() - 1)];
  if (slot.key == key && slot.filled) return slot.value;
  const int d = model_.group_size();
  for (int i = 0; i < d; ++i) members_a_[i] = member_a(i), members_b_[i] = member_b(i);
  slot = {key, compute(members_a_, members_b_), true};  // direct-mapped: newest wins
  return slot.value;
}

// Cost of a partition with the best path: DATAP + open path over the
// bottleneck values of every group pair.
double partition_cost(const CostModel& model, const Assignment& assignment, int exact_path_limit,
                      GroupPairCache& cache);

// group label of each device <-> assignment (members in ascending id order).
std::vector<int> labels_of(const Assignment& assignment, int group_size);
Assignment assignment_of(const std::vector<int>& labels, int groups, int group_size);

// Local searches: improve `assignment` in place.
void paper_local_search(const CostModel& model, Assignment& assignment, bool off_by_one);
void swap_local_search(const CostModel& model, Assignment& assignment, Rng& rng,
                       int exact_path_limit, int move_budget, GroupPairCache& cache);

// Structured starting points: rank orders and cluster packings.
std::vector<Assignment> structured_seeds(const CostModel& model, int limit);

}  // namespace geotrain::plan
