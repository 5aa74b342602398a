#include "geotrain/plan/search.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <thread>

#include "geotrain/plan/bottleneck_matching.hpp"
#include "geotrain/plan/open_path.hpp"
#include "geotrain/common/enum_names.hpp"
#include "search_internal.hpp"

namespace geotrain::plan {

// ---------------------------------------------------------------- Rng
namespace {
std::uint64_t splitmix(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(std::uint64_t seed) {
  for (auto& s : state_) s = splitmix(seed);
}

std::uint64_t Rng::next() {
  const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const std::uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

int Rng::below(int bound) {
  // Rejection sampling: no modulo bias.
  const std::uint64_t range = static_cast<std::uint64_t>(bound);
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() -
                              std::numeric_limits<std::uint64_t>::max() % range;
  std::uint64_t x;
  do x = next(); while (x >= limit);
  return static_cast<int>(x % range);
}

// ---------------------------------------------------------------- helpers
GroupPairCache::GroupPairCache(const CostModel& model, std::uint64_t seed)
    : model_(model), device_keys_(model.devices()), slots_(size_t{1} << 18), members_a_(model.group_size()),
      members_b_(model.group_size()), block_(static_cast<size_t>(model.group_size()) * model.group_size()) {
  Rng rng(seed ^ 0x5eedca5eull);
  for (auto& key : device_keys_) key = rng.next();
}

std::uint64_t GroupPairCache::group_key(const int* members, int count) const {
  std::uint64_t key = 0;
  for (int i = 0; i < count; ++i) key ^= device_keys_[members[i]];
  return key;
}

double GroupPairCache::compute(const std::vector<int>& a, const std::vector<int>& b) {
  const int d = model_.group_size();
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < d; ++j) block_[i * d + j] = model_.pipeline_link(a[i], b[j]);
  }
  return bottleneck_value(block_.data(), d);
}

double partition_cost(const CostModel& model, const Assignment& assignment, int exact_path_limit,
                      GroupPairCache& cache) {
  const int k = model.groups(), d = model.group_size();
  std::vector<double> group_cost(static_cast<size_t>(k) * k, 0.0);
  for (int a = 0; a < k; ++a) {
    for (int b = a + 1; b < k; ++b) {
      group_cost[a * k + b] = group_cost[b * k + a] = cache.bottleneck(&assignment[a * d], &assignment[b * d]);
    }
  }
  return model.datap(assignment) + open_path(group_cost, k, exact_path_limit).length;
}

std::vector<int> labels_of(const Assignment& assignment, int group_size) {
  std::vector<int> labels(assignment.size());
  for (size_t i = 0; i < assignment.size(); ++i) labels[assignment[i]] = static_cast<int>(i) / group_size;
  return labels;
}

Assignment assignment_of(const std::vector<int>& labels, int groups, int group_size) {
  Assignment assignment(labels.size());
  std::vector<int> filled(groups, 0);
  for (size_t device = 0; device < labels.size(); ++device) {
    const int g = labels[device];
    assignment[g * group_size + filled[g]++] = static_cast<int>(device);
  }
  return assignment;
}

namespace {
constexpr EnumName<LocalSearch> kLocalSearchNames[] = {
    {LocalSearch::none, "none"}, {LocalSearch::paper, "paper"}, {LocalSearch::swap, "swap"}};
}  // namespace

std::string to_string(LocalSearch mode) { return name_in(kLocalSearchNames, mode); }

bool parse_local_search(const std::string& text, LocalSearch* mode) {
  return parse_name_in(kLocalSearchNames, text, mode);
}

SearchOptions SearchOptions::paper_configuration(std::uint64_t seed) {
  SearchOptions o;
  o.seed = seed;
  o.local_search = LocalSearch::paper;
  o.paper_bugs = true;
  o.structured_seeds = false;
  return o;
}

// ---------------------------------------------------------------- GA
namespace {

struct Candidate {
  Assignment assignment;
  double cost;
};

// 5-gene copy crossover with lowest-index repair (reference §3.1).
Assignment crossover(const Assignment& first, const Assignment& second, int genes, int groups,
                     int group_size, Rng& rng) {
  const std::vector<int> labels_first = labels_of(first, group_size);
  std::vector<int> labels = labels_of(second, group_size);
  const int n = static_cast<int>(labels.size());
  std::vector<int> devices(n);
  std::iota(devices.begin(), devices.end(), 0);
  for (int i = 0; i < std::min(genes, n); ++i) {  // partial shuffle: distinct devices
    std::swap(devices[i], devices[i + rng.below(n - i)]);
    labels[devices[i]] = labels_first[devices[i]];
  }
  std::vector<int> size(groups, 0);
  for (int g : labels) ++size[g];
  for (int device = 0; device < n; ++device) {
    if (size[labels[device]] <= group_size) continue;
    int target = 0;
    while (size[target] >= group_size) ++target;
    --size[labels[device]];
    labels[device] = target;
    ++size[target];
  }
  return assignment_of(labels, groups, group_size);
}

struct Island {
  Candidate best{{}, std::numeric_limits<double>::infinity()};
  long evaluations = 0;
  std::vector<double> trace;
};

Island run_island(const CostModel& model, const SearchOptions& options, std::uint64_t seed,
                  const std::vector<Assignment>& seeds) {
  const int n = model.devices(), k = model.groups(), d = model.group_size();
  Rng rng(seed);
  GroupPairCache cache(model, seed);
  Island island;
  auto record = [&](const Assignment& assignment) {
    const double cost = partition_cost(model, assignment, options.exact_path_limit, cache);
    ++island.evaluations;
    if (cost < island.best.cost) island.best = {assignment, cost};
    island.trace.push_back(island.best.cost);
    return cost;
  };

  const int population_size = std::max(2, std::min(options.population, options.candidates));
  std::vector<Candidate> population;
  for (const Assignment& s : seeds) {
    if (static_cast<int>(population.size()) >= population_size / 2) break;
    population.push_back({s, record(s)});
  }
  Assignment identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  while (static_cast<int>(population.size()) < population_size) {
    Assignment a = identity;
    rng.shuffle(a);
    population.push_back({a, record(a)});
  }

  // One move costs up to four d x d bottleneck matchings: keep the work per
  // offspring roughly constant as groups grow.
  const int move_budget = options.swap_moves > 0 ? options.swap_moves
                                                 : std::min({4 * n, 512, std::max(32, 131072 / (d * d))});
  for (long offspring = population_size; offspring < options.candidates; ++offspring) {
    const int i = rng.below(population_size), j = rng.below(population_size);
    Assignment child = crossover(population[i].assignment, population[j].assignment,
                                 options.crossover_genes, k, d, rng);
    if (options.local_search == LocalSearch::paper) {
      paper_local_search(model, child, options.paper_bugs);
    } else if (options.local_search == LocalSearch::swap) {
      swap_local_search(model, child, rng, options.exact_path_limit, move_budget, cache);
    }
    const double cost = record(child);
    const int worse = population[i].cost >= population[j].cost ? i : j;
    // Intended rule: keep the child unless it is worse than both parents.
    // The original's test compares with parent 1 only (§2.5.2).
    const bool reject = options.paper_bugs ? cost > population[i].cost
                                           : cost > std::max(population[i].cost, population[j].cost);
    if (!reject) population[worse] = {std::move(child), cost};
  }
  return island;
}

}  // namespace

SearchResult search_plan(const CostModel& model, const SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const int islands = std::max(1, options.islands);
  std::vector<Assignment> seeds;
  if (options.structured_seeds) seeds = structured_seeds(model, options.population / 2);

  std::vector<Island> results(islands);
  const int threads = std::clamp(options.threads, 1, islands);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int island = t; island < islands; island += threads) {
        results[island] = run_island(model, options, options.seed + 7919ull * island, seeds);
      }
    });
  }
  for (auto& w : workers) w.join();

  SearchResult result;
  int winner = 0;
  for (int island = 0; island < islands; ++island) {
    result.evaluations += results[island].evaluations;
    if (results[island].best.cost < results[winner].best.cost) winner = island;
  }
  result.assignment = results[winner].best.assignment;
  result.plan = complete_plan(model, result.assignment);
  result.best_by_candidate = std::move(results[0].trace);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

SearchResult random_best(const CostModel& model, int samples, std::uint64_t seed) {
  const auto start = std::chrono::steady_clock::now();
  Rng rng(seed);
  SearchResult result;
  Assignment a(model.devices());
  std::iota(a.begin(), a.end(), 0);
  double best = std::numeric_limits<double>::infinity();
  for (int s = 0; s < samples; ++s) {
    rng.shuffle(a);
    const Plan plan = literal_plan(model, a);
    ++result.evaluations;
    if (plan.cost.total_s() < best) {
      best = plan.cost.total_s();
      result.plan = plan;
      result.assignment = a;
    }
    result.best_by_candidate.push_back(best);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace geotrain::plan
