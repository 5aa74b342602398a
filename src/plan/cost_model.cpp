#include "geotrain/plan/cost_model.hpp"

#include <algorithm>

#include "geotrain/common/errors.hpp"

namespace geotrain::plan {

CostModel::CostModel(const Network& network, const Workload& workload)
    : n_(network.device_count),
      stages_(workload.pipeline_stages),
      dp_(workload.data_parallel),
      datap_pair_(static_cast<size_t>(n_) * n_, 0.0),
      link_(static_cast<size_t>(n_) * n_, 0.0) {
  if (stages_ < 1 || dp_ < 1 || stages_ * dp_ != n_) {
    throw InputError("CostModel: pipeline_stages * data_parallel must equal devices");
  }
  const double shard_bytes = workload.c_dp_bytes / dp_;
  // Activations forward and their gradients back may be encoded to
  // different sizes; the search treats a path and its reverse alike, so a
  // link carries their mean each way: exact on symmetric matrices, where
  // the link is t(fwd) + t(back); (x + x) / 2 == x, so equal sizes are unchanged.
  const double pp_bytes = (workload.c_pp_bytes + workload.c_pp_back_bytes()) / 2;
  for (int u = 0; u < n_; ++u) {
    for (int v = 0; v < n_; ++v) {
      if (u == v) continue;
      // §2.2: one shard each way; §2.3: activation forward, gradient back.
      datap_pair_[u * n_ + v] =
          network.transfer_s(u, v, shard_bytes) + network.transfer_s(v, u, shard_bytes);
      // Local steps: one exchange every H steps, its time spread over them;
      // devices of one site may still sum their gradient every step.
      if (workload.datap_period_steps > 1) datap_pair_[u * n_ + v] /= workload.datap_period_steps;
      if (workload.c_dp_site_bytes > 0 && !network.site(u).empty() && network.site(u) == network.site(v)) {
        const double site_shard = workload.c_dp_site_bytes / dp_;
        datap_pair_[u * n_ + v] += network.transfer_s(u, v, site_shard) + network.transfer_s(v, u, site_shard);
      }
      link_[u * n_ + v] = network.transfer_s(u, v, pp_bytes) + network.transfer_s(v, u, pp_bytes);
    }
  }
}

double CostModel::datap_of_device(int u, const int* members, int count) const {
  double sum = 0;
  for (int i = 0; i < count; ++i) sum += datap_pair_[u * n_ + members[i]];  // diagonal is 0
  return sum;
}

double CostModel::datap(const Assignment& assignment) const {
  double worst = 0;
  for (int g = 0; g < stages_; ++g) {
    const int* members = assignment.data() + g * dp_;
    for (int i = 0; i < dp_; ++i) worst = std::max(worst, datap_of_device(members[i], members, dp_));
  }
  return worst;
}

}  // namespace geotrain::plan
