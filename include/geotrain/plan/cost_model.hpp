// The paper's communication cost model (reference dtfm-paper.md §2, §8.1).
//
// Direction convention for asymmetric (measured) matrices:
//  * data parallel: device u sends one 1/D_dp shard of its stage gradient to
//    every other member v of its group (reduce-scatter, u->v) and receives
//    one back (all-gather, v->u). Its cost is
//        sum_v [ t(u->v) + t(v->u) ],   t(a->b) = alpha[a][b] + c_DP / (D_dp * beta[a][b])
//    which, for a symmetric matrix, is the paper's sum_v 2*(alpha + c_DP/(D_dp*beta)).
//    DATAP = max over groups, max over members, of that sum.       [§2.2]
//  * pipeline: activations go forward u->v and their gradients come back
//    v->u, so a link between stage-neighbours u, v costs
//        link(u, v) = p(u->v) + p(v->u),   p(a->b) = alpha[a][b] + c_PP / beta[a][b]
//    For a symmetric matrix link = 2*p, so summing bottleneck matchings of
//    `link` along the path gives the paper's 2*PIPE exactly.      [§2.3, §2.4]
//    With compressed traffic the gradients back may be smaller than the
//    activations (Workload::c_pp_gradient_bytes); c_PP above is then the
//    mean of the two sizes, which keeps link symmetric (paths have no
//    direction in the search) and exact for a symmetric matrix.
//  * TOTAL = DATAP + PIPELINE, PIPELINE = sum over path boundaries of
//    E(A, B) = min over perfect matchings of max link.  Units: seconds.
#pragma once
#include <vector>

#include "geotrain/plan/network.hpp"
#include "geotrain/plan/workload.hpp"

namespace geotrain::plan {

// A partition is a permutation of device ids; positions [g*D_dp, (g+1)*D_dp)
// form group g (the original's encoding, reference §3.1).
using Assignment = std::vector<int>;

struct CostBreakdown {
  double datap_s = 0;     // DATAP
  double pipeline_s = 0;  // both directions: the paper's 2*PIPE
  double total_s() const { return datap_s + pipeline_s; }
};

class CostModel {
 public:
  CostModel(const Network& network, const Workload& workload);

  int devices() const { return n_; }
  int groups() const { return stages_; }
  int group_size() const { return dp_; }
  // Symmetric pair terms (both directions summed), seconds.
  double datap_pair(int u, int v) const { return datap_pair_[u * n_ + v]; }
  double pipeline_link(int u, int v) const { return link_[u * n_ + v]; }
  const std::vector<double>& pipeline_links() const { return link_; }

  // DATAP of the partition encoded by `assignment`.
  double datap(const Assignment& assignment) const;
  // Row sum of one device inside `members` (excluding itself).
  double datap_of_device(int u, const int* members, int count) const;

 private:
  int n_, stages_, dp_;
  std::vector<double> datap_pair_;
  std::vector<double> link_;
};

}  // namespace geotrain::plan
