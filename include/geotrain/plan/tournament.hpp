// Round-robin tournament ("circle method"): which ranks measure their link in
// which round, so that disjoint pairs measure concurrently. N ranks take N-1
// rounds when N is even and N rounds when N is odd (each rank sits out one
// round, its "bye"); every unordered pair meets exactly once.
#pragma once
#include <utility>
#include <vector>

namespace geotrain::plan {

// Rounds needed for n ranks (n >= 1): n - 1 for even n, n for odd n.
int tournament_rounds(int n);

// The rank that `rank` meets in `round` of the schedule for n ranks, or -1
// when `rank` has a bye in that round. Throws InputError for an
// out-of-range rank or round.
int partner_in_round(int n, int rank, int round);

// All rounds: rounds[r] lists the pairs (a, b), a < b, that meet in round r,
// ordered by a. Pairs of one round share no rank.
std::vector<std::vector<std::pair<int, int>>> round_robin_schedule(int n);

}  // namespace geotrain::plan
