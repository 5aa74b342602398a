// Circle method: with M = n rounded up to even, player M-1 stays fixed and
// the others rotate. In round r the fixed player meets r, and every other
// player x meets (2r - x) mod (M-1) (the pairs (r+k, r-k), k = 1..M/2-1).
// For odd n, player M-1 = n does not exist: meeting it is a bye.
#include "geotrain/plan/tournament.hpp"

#include <string>

#include "geotrain/common/errors.hpp"

namespace geotrain::plan {

int tournament_rounds(int n) {
  if (n < 1) throw InputError("tournament: need at least one rank, got " + std::to_string(n));
  return n % 2 == 0 ? n - 1 : n;
}

int partner_in_round(int n, int rank, int round) {
  const int rounds = tournament_rounds(n);
  if (rank < 0 || rank >= n) {
    throw InputError("tournament: rank " + std::to_string(rank) + " outside [0, " +
                     std::to_string(n) + ")");
  }
  if (round < 0 || round >= rounds) {
    throw InputError("tournament: round " + std::to_string(round) + " outside [0, " +
                     std::to_string(rounds) + ")");
  }
  const int m = n % 2 == 0 ? n : n + 1;  // players including the bye
  const int fixed = m - 1;
  int partner;
  if (rank == fixed) {
    partner = round;
  } else if (rank == round) {
    partner = fixed;
  } else {
    partner = ((2 * round - rank) % (m - 1) + (m - 1)) % (m - 1);
  }
  return partner >= n ? -1 : partner;
}

std::vector<std::vector<std::pair<int, int>>> round_robin_schedule(int n) {
  const int rounds = tournament_rounds(n);
  std::vector<std::vector<std::pair<int, int>>> schedule(rounds);
  for (int r = 0; r < rounds; ++r) {
    for (int a = 0; a < n; ++a) {
      const int b = partner_in_round(n, a, r);
      if (b > a) schedule[r].emplace_back(a, b);
    }
  }
  return schedule;
}

}  // namespace geotrain::plan
