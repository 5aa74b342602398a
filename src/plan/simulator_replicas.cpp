// The pipeline phase of an iteration, played event by event: every
// replica's stages run their programs, messages wait for their links, and
// a flushless pipeline's steady step is measured on a stream of steps.
#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

#include "geotrain/plan/flow_sharing.hpp"
#include "geotrain/plan/simulator.hpp"
#include "simulator_internal.hpp"

namespace geotrain::plan::simulation {
namespace {

bool is_transfer(StepKind k) { return k != StepKind::forward && k != StepKind::backward; }

// One replica's pipeline, played step by step: each device's clock and
// program counter, each directed link's next free time, every message's post
// and arrival times. Replicas use disjoint devices and links, so each runs alone.
class ReplicaRun {
 public:
  // link_bandwidth[2 * boundary + direction]: what a message on that link gets (pipeline_bandwidths).
  ReplicaRun(const Network& net, const Plan& plan, const PipelineWork& w,
             const std::vector<std::vector<Step>>& programs, int replica, std::vector<double> link_bandwidth,
             std::vector<TraceEvent>* trace)
      : net_(net), plan_(plan), w_(w), programs_(programs), replica_(replica), link_bandwidth_(std::move(link_bandwidth)),
        trace_(trace),
        stages_(plan.pipeline_stages), slots_(static_cast<size_t>(w.micro_batches_per_flush) * w.flushes),
        clock_(stages_, 0.0), busy_(stages_, 0.0), sending_(stages_, 0.0), pc_(stages_, 0), posted_(stages_, 0),
        messages_(2 * static_cast<size_t>(std::max(stages_ - 1, 1)) * slots_),
        link_free_(2 * static_cast<size_t>(std::max(stages_ - 1, 1)), 0.0) {}

  // Plays every stage's program to its end.
  void run() {
    size_t remaining = 0;
    for (const auto& program : programs_) remaining += program.size();
    while (remaining > 0) {
      bool progress = false;
      for (int s = 0; s < stages_; ++s) progress |= advance_stage(s, &remaining);
      if (!progress) throw std::logic_error("simulate: pipeline program deadlocked");
    }
  }

  // When stage s finished (with overlap: its last backward, whose gradient may
  // still be on the wire to s-1 on another link; without: after that send).
  double finish_s(int s) const { return clock_[s]; }
  double compute_s(int s) const { return busy_[s]; }
  double sending_s(int s) const { return sending_[s]; }

 private:
  struct Message {
    static constexpr double kUnknown = -1.0;
    double sender_post = kUnknown, receiver_post = kUnknown, arrival = kUnknown;
  };
  struct Route {
    int sender, receiver, link;
  };

  // Runs stage s until it must wait; returns whether it moved.
  bool advance_stage(int s, size_t* remaining) {
    const auto& program = programs_[s];
    bool progress = false;
    while (pc_[s] < program.size()) {
      const Step& step = program[pc_[s]];
      size_t advance = 1;
      if (!is_transfer(step.kind)) {
        compute(s, step);
      } else if (w_.overlap_communication) {
        if (!overlapped_transfer(s, step)) break;
      } else {
        bool posted_now = false;
        const bool done = blocking_batch(s, &advance, &posted_now);
        progress |= posted_now;
        if (!done) break;
      }
      pc_[s] += advance;
      *remaining -= advance;
      progress = true;
    }
    return progress;
  }

  void compute(int s, const Step& step) {
    double duration = step.kind == StepKind::forward ? w_.forward_s[s] : w_.backward_s[s];
    if (!w_.device_time_scale.empty()) duration *= w_.device_time_scale[plan_.stages[s][replica_]];
    duration += tensor_allreduce_s(w_, s, plan_.stages[s][replica_], step.kind != StepKind::forward);
    if (trace_) trace_->push_back({replica_, s, step, clock_[s], clock_[s] + duration});
    clock_[s] += duration;
    busy_[s] += duration;
  }

  // Sends go out on the communication stream; receives are posted early, so
  // only their arrival matters. Returns false while a receive waits.
  bool overlapped_transfer(int s, const Step& step) {
    Route route;
    Message& msg = message_of(s, step, &route);
    if (route.sender == s) {
      msg.sender_post = clock_[s];
      start_if_ready(msg, route, step);
      return true;
    }
    if (msg.arrival == Message::kUnknown) return false;
    clock_[s] = std::max(clock_[s], msg.arrival);
    return true;
  }

  // Blocking p2p as Megatron-LM does it: consecutive sends and receives form
  // one batch, posted together; each message starts when both ends have
  // posted it; the device waits for the whole batch. Returns whether the
  // batch completed (*advance: its length); *posted_now: this call posted it.
  bool blocking_batch(int s, size_t* advance, bool* posted_now) {
    const auto& program = programs_[s];
    size_t end = pc_[s];
    while (end < program.size() && is_transfer(program[end].kind)) ++end;
    *advance = end - pc_[s];
    bool complete = true;
    double done_at = clock_[s];
    for (size_t i = pc_[s]; i < end; ++i) {
      Route route;
      Message& msg = message_of(s, program[i], &route);
      if (!posted_[s]) (route.sender == s ? msg.sender_post : msg.receiver_post) = clock_[s];
      start_if_ready(msg, route, program[i]);
      if (msg.arrival == Message::kUnknown) complete = false;
      else done_at = std::max(done_at, msg.arrival);
    }
    if (!posted_[s]) {
      posted_[s] = 1;
      *posted_now = true;
    }
    if (!complete) return false;
    posted_[s] = 0;
    clock_[s] = done_at;
    return true;
  }

  // The message a send/recv step of stage s refers to, and its route.
  Message& message_of(int s, const Step& step, Route* route) {
    const size_t slot = static_cast<size_t>(step.flush) * w_.micro_batches_per_flush + step.micro_batch;
    const bool forward = step.kind == StepKind::send_activation || step.kind == StepKind::recv_activation;
    const bool sends = step.kind == StepKind::send_activation || step.kind == StepKind::send_gradient;
    const int boundary = forward ? (sends ? s : s - 1) : (sends ? s - 1 : s);
    route->sender = forward ? boundary : boundary + 1;
    route->receiver = forward ? boundary + 1 : boundary;
    route->link = 2 * boundary + (forward ? 0 : 1);
    return messages_[static_cast<size_t>(route->link) * slots_ + slot];
  }

  // Starts a message once it may start: the sender has posted it and, for
  // blocking (rendezvous) p2p, the receiver too; a link sends one message at
  // a time (messages on a link are posted in order).
  void start_if_ready(Message& msg, const Route& route, const Step& step) {
    if (msg.arrival != Message::kUnknown || msg.sender_post == Message::kUnknown) return;
    double start = msg.sender_post;
    if (!w_.overlap_communication) {
      if (msg.receiver_post == Message::kUnknown) return;
      start = std::max(start, msg.receiver_post);
    }
    const int u = plan_.stages[route.sender][replica_], v = plan_.stages[route.receiver][replica_];
    const bool forward = route.link % 2 == 0;
    const double bytes = forward ? w_.activation_bytes : w_.activation_gradient_bytes.value_or(w_.activation_bytes);
    const double serialise = bytes / link_bandwidth_[route.link];
    start = std::max(start, link_free_[route.link]);
    link_free_[route.link] = start + serialise;  // the link is busy while the bytes go out
    msg.arrival = start + serialise + net_.latency(u, v);
    // Only the serialisation occupies the sender: the latencies of messages
    // in flight overlap (summing them gave "sends" longer than the iteration).
    sending_[route.sender] += serialise;
    if (trace_) {
      Step sent = step;
      sent.kind = step.kind == StepKind::recv_activation ? StepKind::send_activation
                  : step.kind == StepKind::recv_gradient ? StepKind::send_gradient : step.kind;
      trace_->push_back({replica_, route.sender, sent, start, msg.arrival});
    }
  }

  const Network& net_;
  const Plan& plan_;
  const PipelineWork& w_;
  const std::vector<std::vector<Step>>& programs_;
  const int replica_;
  const std::vector<double> link_bandwidth_;
  std::vector<TraceEvent>* trace_;
  const int stages_;
  const size_t slots_;
  std::vector<double> clock_, busy_, sending_;
  std::vector<size_t> pc_;
  std::vector<char> posted_;  // blocking mode: the stage's current batch is posted
  std::vector<Message> messages_;  // (link, slot); link = 2 * boundary + direction
  std::vector<double> link_free_;
};

// What each replica's messages get on each link (2 * boundary + direction):
// the pair's bandwidth; with shared links, the replicas' messages across one
// boundary in one direction run at once (the replicas play the same program
// in step), so they divide what they share max-min fairly.
std::vector<std::vector<double>> pipeline_bandwidths(const Network& net, const Plan& plan, const PipelineWork& w) {
  const int p = plan.pipeline_stages, d = plan.data_parallel;
  std::vector<std::vector<double>> bandwidth(d, std::vector<double>(2 * static_cast<size_t>(std::max(p - 1, 1)), 0.0));
  for (int boundary = 0; boundary + 1 < p; ++boundary) {
    for (int direction = 0; direction < 2; ++direction) {
      std::vector<Transfer> together;
      for (int r = 0; r < d; ++r) {
        const int u = plan.stages[boundary][r], v = plan.stages[boundary + 1][r];
        together.push_back(direction == 0 ? Transfer{u, v, w.activation_bytes} : Transfer{v, u, w.activation_bytes});
      }
      const auto rates = net.shared.any() ? max_min_rates(flows_on(net, together)) : std::vector<double>{};
      for (int r = 0; r < d; ++r) {
        const Transfer& t = together[r];
        bandwidth[r][2 * boundary + direction] = rates.empty() ? net.bandwidth(t.from, t.to) : rates[r];
      }
    }
  }
  return bandwidth;
}

// Everything a replica's timing depends on: its devices' speeds and the
// latency and bandwidth of its links both ways.
std::vector<double> replica_signature(const Network& net, const Plan& plan, const PipelineWork& w, int r,
                                      const std::vector<double>& link_bandwidth) {
  std::vector<double> key;
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    const int u = plan.stages[s][r];
    key.push_back(w.device_time_scale.empty() ? 1.0 : w.device_time_scale[u]);
    key.push_back(tensor_allreduce_s(w, s, u, false));
    key.push_back(tensor_allreduce_s(w, s, u, true));
    if (s + 1 == plan.pipeline_stages) continue;
    const int v = plan.stages[s + 1][r];
    key.insert(key.end(), {net.latency(u, v), link_bandwidth[2 * s], net.latency(v, u), link_bandwidth[2 * s + 1]});
  }
  return key;
}

}  // namespace

PipelinePhase play_replicas(const Network& net, const Plan& plan, const PipelineWork& w,
                            const std::vector<std::vector<Step>>& programs, std::vector<TraceEvent>* trace) {
  const int p = plan.pipeline_stages, d = plan.data_parallel;
  PipelinePhase phase;
  phase.last_backward_s.assign(p, 0.0);
  phase.compute_s.assign(p, 0.0);
  phase.sending_s.assign(p, 0.0);
  // Replicas whose devices and links are alike time alike: play each kind once.
  std::map<std::vector<double>, std::vector<double>> played;
  const auto bandwidth = pipeline_bandwidths(net, plan, w);
  for (int r = 0; r < d; ++r) {
    std::vector<double>& times =
        played[trace ? std::vector<double>{double(r)} : replica_signature(net, plan, w, r, bandwidth[r])];
    if (times.empty()) {
      ReplicaRun replica(net, plan, w, programs, r, bandwidth[r], trace);
      replica.run();
      for (int s = 0; s < p; ++s) times.insert(times.end(), {replica.finish_s(s), replica.compute_s(s), replica.sending_s(s)});
    }
    for (int s = 0; s < p; ++s) {
      phase.last_backward_s[s] = std::max(phase.last_backward_s[s], times[3 * s]);
      phase.compute_s[s] = std::max(phase.compute_s[s], times[3 * s + 1]);
      phase.sending_s[s] = std::max(phase.sending_s[s], times[3 * s + 2]);
      phase.total_compute += times[3 * s + 1];
      phase.device_compute.push_back(times[3 * s + 1]);
    }
  }
  return phase;
}

// One flushless step: what kFlushlessSteps steps of the stream take beyond
// half as many, per step (the fill and the drain cancel out). `trace`
// receives the longer stream, its micro-batches numbered through.
PipelinePhase flushless_step(const Network& net, const Plan& plan, const PipelineWork& w,
                             std::vector<TraceEvent>* trace) {
  const int p = plan.pipeline_stages, m = w.micro_batches_per_flush;
  // The runtime's slices joined, their micro-batches numbered through.
  auto stream = [&](int steps, std::vector<TraceEvent>* events) {
    PipelineWork joined = w;
    joined.micro_batches_per_flush = steps * m;
    joined.flushes = 1;
    std::vector<std::vector<Step>> programs(static_cast<std::size_t>(p));
    for (int s = 0; s < p; ++s) {
      for (int t = 0; t < steps; ++t) {
        for (Step step : flushless_program(s, p, m, t == 0, t + 1 == steps, w.flushless_ahead)) {
          step.micro_batch += (t + step.flush) * m;
          step.flush = 0;
          programs[static_cast<std::size_t>(s)].push_back(step);
        }
      }
    }
    return play_replicas(net, plan, joined, programs, events);
  };
  const PipelinePhase shorter = stream(kFlushlessSteps / 2, nullptr), longer = stream(kFlushlessSteps, trace);
  const double steps = kFlushlessSteps - kFlushlessSteps / 2;
  PipelinePhase step = longer;
  auto per_step = [&](double a, double b) { return (b - a) / steps; };
  for (int s = 0; s < p; ++s) {
    step.last_backward_s[s] = per_step(shorter.last_backward_s[s], longer.last_backward_s[s]);
    step.compute_s[s] = per_step(shorter.compute_s[s], longer.compute_s[s]);
    step.sending_s[s] = per_step(shorter.sending_s[s], longer.sending_s[s]);
  }
  step.total_compute = per_step(shorter.total_compute, longer.total_compute);
  for (std::size_t k = 0; k < step.device_compute.size(); ++k) {
    step.device_compute[k] = per_step(shorter.device_compute[k], longer.device_compute[k]);
  }
  return step;
}

}  // namespace geotrain::plan::simulation
