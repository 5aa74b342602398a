// The hybrid genetic search over partitions (reference §3) and its baselines.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "geotrain/plan/plan.hpp"

namespace geotrain::plan {

enum class LocalSearch {
  none,       // GA only
  paper,      // the original's cyclic multi-way moves with its "default" gains (§3.2)
  swap,       // geotrain: swap moves scored by the true cost, incrementally
};

struct SearchOptions {
  std::uint64_t seed = 1;
  int candidates = 5000;    // evaluated candidates per island, initial population included
  int population = 100;
  int crossover_genes = 5;
  LocalSearch local_search = LocalSearch::swap;
  // Reproduce the original's replacement test (§2.5.2) and the off-by-one in
  // its local search (§2.5.4); for comparisons only.
  bool paper_bugs = false;
  bool structured_seeds = true;        // rank orders + cluster packings in the first population
  int islands = 1;                     // independent populations, best one wins
  int threads = 1;                     // islands run concurrently; result independent of it
  int exact_path_limit = 12;
  int swap_moves = 0;                  // move evaluations per offspring; 0: min(4N, 512, max(32, 131072/D_dp^2))           // Held-Karp inside the loop up to this many groups
  // The original code exactly: paper local search, replacement bug, random
  // initial population only, one island.
  static SearchOptions paper_configuration(std::uint64_t seed);
};

struct SearchResult {
  Plan plan;
  Assignment assignment;
  double seconds = 0;
  long evaluations = 0;
  std::vector<double> best_by_candidate;  // running minimum, island 0
};

SearchResult search_plan(const CostModel& model, const SearchOptions& options);

// Best of `samples` uniformly random permutations scored literally (§3.3):
// what training without a scheduler means.
SearchResult random_best(const CostModel& model, int samples, std::uint64_t seed);

std::string to_string(LocalSearch mode);
bool parse_local_search(const std::string& text, LocalSearch* mode);

}  // namespace geotrain::plan
