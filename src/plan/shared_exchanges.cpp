// The data-parallel sums of every stage group on a network with shared
// links, played together: each sum (each gradient bucket, as it fills) is a
// job of phases that starts at its ready time, and every job's transfers in
// flight at once share what they cross (flow_sharing.hpp). Apart, each group
// would assume the links its neighbours' sums use at the same time are free.
#include <algorithm>
#include <limits>
#include <vector>

#include "geotrain/plan/exchange_pattern.hpp"
#include "geotrain/plan/flow_sharing.hpp"
#include "simulator_internal.hpp"

namespace geotrain::plan::simulation {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

struct Job {
  int stage = 0;
  std::vector<ExchangePhase> phases;
  size_t phase = 0;
  int repeat = 0;         // of the current phase
  double next = kNever;   // when its next phase starts (or it ends, past the last)
  double end = 0;
  bool done = false;
};

struct Flow {
  int job;
  Transfer transfer;
  double left;
  double after;  // from its last byte to its phase's end: its latency (a chain's: all the hops')
};

// The jobs of stage s: its buckets as the backward fills them, then the rest
// when it ends (datap_end_s's schedule), each priced by the scheme's phases.
void add_stage_jobs(const Network& net, const std::vector<int>& group, double total, const PipelineWork& w, int s,
                    double finish, std::vector<Job>* jobs) {
  const DataParallelScheme scheme = stage_scheme(w, s);
  auto job = [&](double ready, double bytes) {
    Job j;
    j.stage = s, j.next = ready;
    j.phases = exchange_phases(net, group, bytes, scheme);
    jobs->push_back(std::move(j));
  };
  if (!sums_in_buckets(w, s)) return job(finish, total);
  const BucketSchedule buckets = bucket_schedule(group, total, w, s, finish);
  for (double ready : buckets.ready) job(ready, w.bucket_bytes);
  job(finish, total - buckets.sent);
}

class JointExchanges {
 public:
  JointExchanges(const Network& net, std::vector<Job> jobs)
      : net_(net), resources_(net), jobs_(std::move(jobs)), arrival_(jobs_.size(), 0.0) {}

  void run() {
    double now = 0;
    for (;;) {
      const auto rates = flows_.empty() ? std::vector<double>{} : max_min_rates(problem_);
      double step = kNever;
      for (size_t f = 0; f < flows_.size(); ++f) step = std::min(step, flows_[f].left / rates[f]);
      double event = now + step;
      for (const Job& j : jobs_) {
        if (!j.done && j.next < event) event = j.next;
      }
      if (event == kNever) return;
      drain(rates, event - now, event);
      now = event;
      for (size_t k = 0; k < jobs_.size(); ++k) {
        if (!jobs_[k].done && jobs_[k].next <= now) start_next_phase(static_cast<int>(k), now);
      }
    }
  }

  double end_of_stage(int s) const {
    double end = 0;
    for (const Job& j : jobs_) {
      if (j.stage == s) end = std::max(end, j.end);
    }
    return end;
  }

 private:
  // Moves every flow `seconds` on; a job whose phase has drained starts its
  // next phase once the phase's last transfer has arrived (its latency after).
  void drain(const std::vector<double>& rates, double seconds, double now) {
    // A flow ends within the clock's resolution of its end: a step too small
    // to move `now` (1e-17 s at 10 s) would otherwise drain nothing, forever.
    const double resolution = std::max(now, 1.0) * 1e-12;
    size_t kept = 0;
    for (size_t f = 0; f < flows_.size(); ++f) {
      Flow& flow = flows_[f];
      flow.left -= rates[f] * seconds;
      if (flow.left > flow.transfer.bytes * 1e-12 && flow.left > rates[f] * resolution) {
        if (kept != f) flows_[kept] = std::move(flow), problem_.path[kept] = std::move(problem_.path[f]);
        ++kept;
      } else {
        arrival_[flow.job] = std::max(arrival_[flow.job], now + flow.after);
      }
    }
    flows_.resize(kept), problem_.path.resize(kept);
    std::vector<int> in_flight(jobs_.size(), 0);
    for (const Flow& f : flows_) ++in_flight[f.job];
    for (size_t k = 0; k < jobs_.size(); ++k) {
      if (!jobs_[k].done && jobs_[k].next == kNever && in_flight[k] == 0) jobs_[k].next = arrival_[k];
    }
  }

  void start_next_phase(int k, double now) {
    Job& j = jobs_[k];
    if (j.phase < j.phases.size() && j.repeat == j.phases[j.phase].repeat) ++j.phase, j.repeat = 0;
    if (j.phase >= j.phases.size()) {
      j.done = true, j.end = now;
      return;
    }
    const ExchangePhase& phase = j.phases[j.phase];
    const std::vector<Transfer> transfers = phase_transfers(phase);
    ++j.repeat;
    j.next = kNever;
    // A pipelined chain's hops add their latencies; other transfers each its own.
    double chain = 0;
    for (const Transfer& t : transfers) chain += phase.pipelined_chain ? net_.latency(t.from, t.to) : 0.0;
    arrival_[k] = now;
    bool any = false;
    for (const Transfer& t : transfers) {
      const double after = phase.pipelined_chain ? chain : net_.latency(t.from, t.to);
      if (t.bytes > 0) {
        flows_.push_back({k, t, t.bytes, after});
        problem_.path.push_back(resources_.path(t));
        any = true;
      } else {
        arrival_[k] = std::max(arrival_[k], now + after);
      }
    }
    if (!any) j.next = arrival_[k];
    problem_.capacity = resources_.capacities();  // with the resources this phase's flows were first to cross
  }

  const Network& net_;
  LinkResources resources_;
  FlowProblem problem_;  // the paths of flows_, in their order, over the resources numbered so far
  std::vector<Job> jobs_;
  std::vector<Flow> flows_;
  std::vector<double> arrival_;  // per job: when its current phase's transfers have all arrived
};

}  // namespace

std::vector<double> shared_datap_ends(const Network& net, const Plan& plan, const PipelineWork& w,
                                      const std::vector<double>& finish) {
  std::vector<Job> jobs;
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    if (plan.stages[s].size() > 1) add_stage_jobs(net, plan.stages[s], w.gradient_bytes[s], w, s, finish[s], &jobs);
  }
  JointExchanges joint(net, std::move(jobs));
  joint.run();
  std::vector<double> ends(finish);
  for (int s = 0; s < plan.pipeline_stages; ++s) ends[s] = std::max(finish[s], joint.end_of_stage(s));
  return ends;
}

}  // namespace geotrain::plan::simulation
