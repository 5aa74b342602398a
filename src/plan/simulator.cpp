#include "geotrain/plan/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>

#include "geotrain/common/enum_names.hpp"
#include "geotrain/plan/cost_model.hpp"
#include "simulator_internal.hpp"

namespace geotrain::plan {
namespace {

int layers_of_stage(int layers, int stage, int stages) {
  return layers / stages + (stage < layers % stages ? 1 : 0);
}


// The cost model's DATAP (§2.2) of one group alone: CostModel::datap on the
// group's own links with this stage's gradient as c_DP, summed in the same
// order (so bit for bit the same), without building a subnetwork per call.
double paper_datap_s(const Network& network, const std::vector<int>& members, double bytes) {
  const double shard = bytes / static_cast<double>(members.size());
  double worst = 0;
  for (int u : members) {
    double sum = 0;
    for (int v : members) {
      if (v != u) sum += network.transfer_s(u, v, shard) + network.transfer_s(v, u, shard);
    }
    worst = std::max(worst, sum);
  }
  return worst;
}

}  // namespace

double layer_forward_flops(const ModelShape& m, double sequences) {
  const double s = m.sequence_length, h = m.hidden;
  // QKV + output projection 8bsh^2, MLP 16bsh^2, attention scores and
  // weighted sum 4bs^2h: 24bsh^2 (1 + s/(6h)).
  return 24.0 * sequences * s * h * h * (1.0 + s / (6.0 * h));
}

double stage_parameters(const ModelShape& m, int layers, bool first, bool last) {
  const double h = m.hidden;
  double params = layers * (12.0 * h * h + 13.0 * h);
  if (first) params += (static_cast<double>(m.vocabulary) + m.sequence_length) * h;
  if (last) params += 2.0 * h;  // final layer norm
  return params;
}

double stage_parameters_per_rank(const ModelShape& m, int layers, bool first, bool last, int t) {
  if (t <= 1) return stage_parameters(m, layers, first, last);
  const double h = m.hidden;
  double params = layers * (12.0 * h * h / t + 7.0 * h / t + 6.0 * h);
  if (first) params += std::ceil(static_cast<double>(m.vocabulary) / t) * h + static_cast<double>(m.sequence_length) * h;
  if (last) params += 2.0 * h;
  return params;
}

double tensor_allreduce_s(const PipelineWork& w, int s, int device, bool backward) {
  if (w.tensor_parallel <= 1 || w.tensor_latency_s.empty()) return 0.0;
  const double t = w.tensor_parallel;
  const double count = backward ? w.tensor_backward_allreduces[s] : w.tensor_forward_allreduces[s];
  const double bytes = backward ? w.tensor_backward_bytes[s] : w.tensor_forward_bytes[s];
  return 2.0 * (t - 1.0) * (count * w.tensor_latency_s[device] + bytes / (t * w.tensor_bandwidth_bytes_per_s[device]));
}

double stage_parameters(const ModelShape& m, int stage, int stages) {
  return stage_parameters(m, layers_of_stage(m.layers, stage, stages), stage == 0, stage == stages - 1);
}

std::vector<int> stage_layers(const ModelShape& m, int stages, const std::vector<int>& given) {
  std::vector<int> layers;
  if (given.empty()) {
    for (int s = 0; s < stages; ++s) layers.push_back(layers_of_stage(m.layers, s, stages));
    return layers;
  }
  if (static_cast<int>(given.size()) != stages) {
    throw std::invalid_argument(std::to_string(given.size()) + " layer counts for " + std::to_string(stages) + " stages");
  }
  long total = 0;
  for (int l : given) {
    if (l < 0) throw std::invalid_argument("a stage cannot hold " + std::to_string(l) + " layers");
    total += l;
  }
  if (total != m.layers) {
    throw std::invalid_argument("the stages hold " + std::to_string(total) + " layers but the model has " +
                                std::to_string(m.layers));
  }
  return given;
}

double iteration_flops(const SimulationConfig& c, FlopsFormula formula) {
  const ModelShape& m = c.model;
  const double B = c.global_batch_sequences, s = m.sequence_length, l = m.layers, h = m.hidden,
               V = m.vocabulary;
  switch (formula) {
    case FlopsFormula::paper:
      return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h));
    case FlopsFormula::megatron:
      return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
    case FlopsFormula::executed:
      return l * (c.recompute ? 4.0 : 3.0) * layer_forward_flops(m, B) + (c.lm_head ? 6.0 * B * s * h * V : 0.0);
  }
  return 0;
}

namespace {

// Micro-batches per replica per iteration; throws where the shapes do not fit.
int checked_micro_batches(const SimulationConfig& c, int stages, int data_parallel) {
  const TrainingShape& m = c.model;
  if (stages < 1 || data_parallel < 1) throw std::invalid_argument("pipeline stages and data-parallel degree must be >= 1");
  if (m.layers < stages) {
    throw std::invalid_argument("the model has " + std::to_string(m.layers) + " layers, fewer than the " +
                                std::to_string(stages) + " pipeline stages");
  }
  if (c.micro_batch_sequences < 1 || c.global_batch_sequences < 1) throw std::invalid_argument("batch sizes must be >= 1");
  if (c.global_batch_sequences % (data_parallel * c.micro_batch_sequences) != 0) {
    throw std::invalid_argument("global batch " + std::to_string(c.global_batch_sequences) +
                                " is not a multiple of data-parallel degree x micro-batch = " +
                                std::to_string(data_parallel) + " x " + std::to_string(c.micro_batch_sequences));
  }
  if (!(c.peak_tflops > 0) || !(c.efficiency > 0) || !std::isfinite(c.peak_tflops) || !std::isfinite(c.efficiency)) {
    throw std::invalid_argument("peak TFLOPS and efficiency must be finite and > 0");
  }
  return c.global_batch_sequences / data_parallel / c.micro_batch_sequences;
}

// Bytes on the wire: activations and their gradients per micro-batch, each
// stage's gradient, the tied embedding; encoded as config.model.wire says.
void add_traffic(const SimulationConfig& c, const std::vector<int>& layers, PipelineWork& w) {
  const TrainingShape& m = c.model;
  const int stages = static_cast<int>(layers.size());
  const double head = static_cast<double>(m.vocabulary) * m.hidden;  // V x h
  // Tensor parallel: a rank holds (and exchanges) its share; the head is vocabulary-parallel too.
  const int t = std::max(1, c.tensor_parallel);
  const double head_per_rank = std::ceil(static_cast<double>(m.vocabulary) / t) * m.hidden;
  for (int s = 0; s < stages; ++s) {
    double parameters = stage_parameters_per_rank(m, layers[s], s == 0, s == stages - 1, t);
    // The last stage holds the head: a copy of wte if tied (with D_pp = 1 it is stage 0's own), or its own.
    if (c.lm_head && s == stages - 1 && (stages > 1 || !c.tied_head)) parameters += t > 1 ? head_per_rank : head;
    // Local steps: the pseudo-gradient on the outer wire, no per-step gradient
    // (but the fp32 one within sites, with outer.within_site).
    const auto& gradient_wire = m.outer.enabled() ? m.outer.wire : m.wire.gradients;
    w.gradient_bytes.push_back(traffic_bytes(gradient_wire, parameters, m.gradient_bytes));
    if (m.outer.within_site) w.site_gradient_bytes.push_back(parameters * m.gradient_bytes);
  }
  w.outer = m.outer;
  const double values = static_cast<double>(c.micro_batch_sequences) * m.sequence_length * m.hidden;
  w.activation_bytes = traffic_bytes(m.wire.activations, values, m.activation_bytes);
  if (m.wire.activations || m.wire.activation_gradients) {
    w.activation_gradient_bytes = traffic_bytes(m.wire.activation_gradients, values, m.activation_bytes);
  }
  // Buckets overlap a per-step exchange with the backward (with local steps:
  // the sites' fp32 one); the outer sync follows the optimizer step.
  if (c.gradient_bucket_mb > 0 && (!m.outer.enabled() || m.outer.within_site)) {
    const std::optional<WireEncoding> step_wire = m.outer.enabled() ? std::nullopt : m.wire.gradients;
    const double per_layer = 12.0 * m.hidden * m.hidden + 13.0 * m.hidden;  // GPT-2 block: weights and biases
    const double bucket_values = c.gradient_bucket_mb * (1 << 20) / 4.0;  // the runtime's fp32 floats
    w.bucket_bytes = traffic_bytes(step_wire, bucket_values, m.gradient_bytes);
    for (int s = 0; s < stages; ++s) {
      const double values = layers[s] * per_layer;  // this stage's layers, even or as the layout splits them
      w.layer_gradient_bytes.push_back(traffic_bytes(step_wire, values, m.gradient_bytes));
    }
  }
  // The tied embedding's gradient as compression.tied_embedding encodes it (default fp32).
  if (c.lm_head && c.tied_head && stages > 1) {
    w.tied_embedding_bytes = traffic_bytes(m.wire.tied_embedding, t > 1 ? head_per_rank : head, m.gradient_bytes);
  }
}

// Megatron's all-reduces per micro-batch of N = b*s tokens (f and g
// operators): each layer 2 of N*h values forward, 2 backward (2 more with
// recomputation, which repeats the forward); the vocabulary-parallel
// embedding 1 forward (first stage); the vocabulary-parallel head: the
// loss's max, sum and target logit (3N fp32 values) forward and the
// gradient of its input (N*h) backward (last stage).
void add_tensor_allreduces(const SimulationConfig& c, const std::vector<int>& layers, PipelineWork& w) {
  const TrainingShape& m = c.model;
  const int stages = static_cast<int>(layers.size());
  const double N = static_cast<double>(c.micro_batch_sequences) * m.sequence_length;
  const double activation = N * m.hidden * m.activation_bytes;
  w.tensor_parallel = c.tensor_parallel;
  for (int s = 0; s < stages; ++s) {
    double forward = 2.0 * layers[s], backward = (c.recompute ? 4.0 : 2.0) * layers[s];
    double forward_bytes = forward * activation, backward_bytes = backward * activation;
    if (s == 0) forward += 1, forward_bytes += activation;
    if (c.lm_head && s == stages - 1) {
      forward += 1, forward_bytes += 3.0 * N * 4.0;
      backward += 1, backward_bytes += activation;
    }
    w.tensor_forward_allreduces.push_back(forward);
    w.tensor_forward_bytes.push_back(forward_bytes);
    w.tensor_backward_allreduces.push_back(backward);
    w.tensor_backward_bytes.push_back(backward_bytes);
  }
  w.tensor_latency_s = c.tensor_latency_s;
  w.tensor_bandwidth_bytes_per_s = c.tensor_bandwidth_bytes_per_s;
}

}  // namespace

PipelineWork pipeline_work(const SimulationConfig& c, int stages, int data_parallel) {
  const TrainingShape& m = c.model;
  const int micro_batches = checked_micro_batches(c, stages, data_parallel);
  int flush = c.micro_batches_per_flush;
  if (flush <= 0 || flush > micro_batches) flush = micro_batches;
  if (micro_batches % flush != 0) {
    throw std::invalid_argument(std::to_string(micro_batches) + " micro-batches per replica are not a multiple of " +
                                std::to_string(flush) + " micro-batches per flush");
  }
  PipelineWork w;
  w.micro_batches_per_flush = flush;
  w.flushes = micro_batches / flush;
  w.schedule = c.schedule;
  w.flushless = c.flushless;
  w.flushless_ahead = c.flushless_ahead;
  w.dp_scheme = c.dp_scheme;
  w.overlap_communication = c.overlap_communication;
  const double b = c.micro_batch_sequences;
  const double rate = c.peak_tflops * 1e12 * c.efficiency;  // FLOP/s
  const double layer = layer_forward_flops(m, b);
  const double head = 2.0 * b * m.sequence_length * m.hidden * static_cast<double>(m.vocabulary);
  const std::vector<int> layers = stage_layers(m, stages, c.layers_per_stage);
  for (int s = 0; s < stages; ++s) {
    const int l = layers[s];
    double forward = l * layer, backward = l * (c.recompute ? 3.0 : 2.0) * layer;
    if (c.lm_head && s == stages - 1) {
      forward += head;
      backward += 2.0 * head;
    }
    w.forward_s.push_back(forward / rate);
    w.backward_s.push_back(backward / rate);
  }
  add_traffic(c, layers, w);
  if (c.tensor_parallel > 1) add_tensor_allreduces(c, layers, w);
  for (double tflops : c.device_tflops) {
    if (!(tflops > 0) || !std::isfinite(tflops)) throw std::invalid_argument("device TFLOPS must be finite and > 0");
    w.device_time_scale.push_back(c.peak_tflops / tflops);
  }
  return w;
}

double datap_exchange_s(const Network& net, const std::vector<int>& g, double bytes, DataParallelScheme scheme) {
  const int d = static_cast<int>(g.size());
  if (d <= 1) return 0.0;
  const double shard = bytes / d;
  switch (scheme) {
    case DataParallelScheme::paper:
      return paper_datap_s(net, g, bytes);
    case DataParallelScheme::ring: {
      double step = 0;
      for (int k = 0; k < d; ++k) step = std::max(step, net.transfer_s(g[k], g[(k + 1) % d], shard));
      return 2.0 * (d - 1) * step;
    }
    case DataParallelScheme::direct: {
      double slowest = 0;  // each phase: every pair at once, each on its own link
      for (int u : g) {
        for (int v : g) {
          if (u != v) slowest = std::max(slowest, net.transfer_s(u, v, d == 2 ? bytes : shard));
        }
      }
      return d == 2 ? slowest : 2.0 * slowest;
    }
    case DataParallelScheme::central: {
      // Reduce along g1 -> g2 -> ... -> g(d-1) -> g0, broadcast g0 -> g1 -> ... -> g(d-1);
      // each a chain pipelined in small chunks: the latencies add up, the
      // bytes pass once through the chain's slowest link.
      auto chain = [&](const std::vector<int>& order) {
        double latency = 0, slowest = std::numeric_limits<double>::infinity();
        for (size_t k = 0; k + 1 < order.size(); ++k) {
          latency += net.latency(order[k], order[k + 1]);
          slowest = std::min(slowest, net.bandwidth(order[k], order[k + 1]));
        }
        return latency + bytes / slowest;
      };
      std::vector<int> reduce(g.begin() + 1, g.end());
      reduce.push_back(g[0]);
      return chain(reduce) + chain(g);
    }
  }
  return 0;
}

namespace simulation {

// When the sum of `total` bytes over `group` (stage s's data-parallel group,
// or its devices in one site) ends, the stage's last backward ending at
// `finish`. With buckets (runtime/gradient_buckets.hpp) the layers' gradient
// becomes ready evenly over that backward, a bucket starts once it is full,
// and the buckets' bytes queue on the group's links while their latencies
// overlap (all are in flight together): the sum ends one exchange latency
// after the last bytes, which are the rest (embeddings, head and any partial
// bucket) sent from the backward's end.
double datap_end_s(const Network& net, const std::vector<int>& group, double total, const PipelineWork& w, int s,
                   double finish) {
  if (!(w.bucket_bytes > 0) || static_cast<int>(w.layer_gradient_bytes.size()) <= s) {
    return finish + datap_exchange_s(net, group, total, w.dp_scheme);
  }
  const double latency = datap_exchange_s(net, group, 0.0, w.dp_scheme);
  auto bytes_s = [&](double bytes) { return datap_exchange_s(net, group, bytes, w.dp_scheme) - latency; };
  const double layers = std::min(w.layer_gradient_bytes[s], total);
  // Mixed devices: the group's slowest device runs the longest last backward.
  double backward = 0;
  for (int d : group) {
    const double scale = w.device_time_scale.empty() ? 1.0 : w.device_time_scale[d];
    backward = std::max(backward, w.backward_s[s] * scale + tensor_allreduce_s(w, s, d, true));
  }
  double link_free = finish - backward, sent = 0;
  while (layers - sent >= w.bucket_bytes) {
    sent += w.bucket_bytes;
    const double ready = finish - backward + backward * sent / layers;
    link_free = std::max(link_free, ready) + bytes_s(w.bucket_bytes);
  }
  return std::max(link_free, finish) + bytes_s(total - sent) + latency;
}

}  // namespace simulation

namespace {

void check_plan_fits(const Network& net, const Plan& plan, const PipelineWork& w) {
  const int p = plan.pipeline_stages, d = plan.data_parallel;
  if (p < 1 || d < 1 || static_cast<int>(plan.stages.size()) != p) throw std::invalid_argument("simulate: bad plan shape");
  if (static_cast<int>(w.forward_s.size()) != p || static_cast<int>(w.backward_s.size()) != p ||
      static_cast<int>(w.gradient_bytes.size()) != p) {
    throw std::invalid_argument("simulate: work has " + std::to_string(w.forward_s.size()) + " stages, plan has " +
                                std::to_string(p));
  }
  if (!w.device_time_scale.empty() && static_cast<int>(w.device_time_scale.size()) != net.device_count) {
    throw std::invalid_argument("simulate: " + std::to_string(w.device_time_scale.size()) +
                                " device speeds for a network of " + std::to_string(net.device_count));
  }
  if (w.micro_batches_per_flush < 1 || w.flushes < 1) {
    throw std::invalid_argument("simulate: need at least one micro-batch and one flush");
  }
  if (w.outer.enabled() && w.outer.within_site && static_cast<int>(w.site_gradient_bytes.size()) != p) {
    throw std::invalid_argument("simulate: sites summing every step need each stage's gradient bytes (" +
                                std::to_string(w.site_gradient_bytes.size()) + " for " + std::to_string(p) + " stages)");
  }
  if (w.tensor_parallel > 1 && !w.tensor_latency_s.empty()) {
    if (static_cast<int>(w.tensor_latency_s.size()) != net.device_count ||
        static_cast<int>(w.tensor_bandwidth_bytes_per_s.size()) != net.device_count ||
        static_cast<int>(w.tensor_forward_allreduces.size()) != p || static_cast<int>(w.tensor_backward_allreduces.size()) != p) {
      throw std::invalid_argument("simulate: tensor-parallel links for " + std::to_string(w.tensor_latency_s.size()) +
                                  " units, the network has " + std::to_string(net.device_count));
    }
  }
  std::vector<char> used(net.device_count, 0);
  for (const auto& stage : plan.stages) {
    if (static_cast<int>(stage.size()) != d) throw std::invalid_argument("simulate: bad plan shape");
    for (int dev : stage) {
      if (dev < 0 || dev >= net.device_count || used[dev]) {
        throw std::invalid_argument("simulate: device " + std::to_string(dev) + " out of range or used twice");
      }
      used[dev] = 1;
    }
  }
}

bool is_transfer(StepKind k) { return k != StepKind::forward && k != StepKind::backward; }

// One replica's pipeline, played step by step: each device's clock and
// program counter, each directed link's next free time, every message's post
// and arrival times. Replicas use disjoint devices and links, so each runs alone.
class ReplicaRun {
 public:
  ReplicaRun(const Network& net, const Plan& plan, const PipelineWork& w,
             const std::vector<std::vector<Step>>& programs, int replica, std::vector<TraceEvent>* trace)
      : net_(net), plan_(plan), w_(w), programs_(programs), replica_(replica), trace_(trace),
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
    const double serialise = bytes / net_.bandwidth(u, v);
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
  std::vector<TraceEvent>* trace_;
  const int stages_;
  const size_t slots_;
  std::vector<double> clock_, busy_, sending_;
  std::vector<size_t> pc_;
  std::vector<char> posted_;  // blocking mode: the stage's current batch is posted
  std::vector<Message> messages_;  // (link, slot); link = 2 * boundary + direction
  std::vector<double> link_free_;
};

// Everything a replica's timing depends on: its devices' speeds and the
// latency and bandwidth of its links both ways.
std::vector<double> replica_signature(const Network& net, const Plan& plan, const PipelineWork& w, int r) {
  std::vector<double> key;
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    const int u = plan.stages[s][r];
    key.push_back(w.device_time_scale.empty() ? 1.0 : w.device_time_scale[u]);
    key.push_back(tensor_allreduce_s(w, s, u, false));
    key.push_back(tensor_allreduce_s(w, s, u, true));
    if (s + 1 == plan.pipeline_stages) continue;
    const int v = plan.stages[s + 1][r];
    key.insert(key.end(), {net.latency(u, v), net.bandwidth(u, v), net.latency(v, u), net.bandwidth(v, u)});
  }
  return key;
}

// Each stage group exchanges its gradient once its last backward is done
// in every replica; the iteration ends with the slowest group.
void add_datap_exchanges(const Network& net, const Plan& plan, const PipelineWork& w, SimulationResult* result) {
  result->iteration_s = result->pipeline_phase_s;
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    // What the step waits for after the backward: the exposed part of the sum.
    const double finish = result->stage_last_backward_s[s];
    const double exchange = simulation::datap_end_s(net, plan.stages[s], w.gradient_bytes[s], w, s, finish) - finish;
    result->stage_datap_s.push_back(exchange);
    result->datap_comm_s = std::max(result->datap_comm_s, exchange);
    result->iteration_s = std::max(result->iteration_s, result->stage_last_backward_s[s] + exchange);
  }
}

// The tied embedding: once its group's exchange is done, each end of a
// replica sends its gradient of wte to the other (gradient_sync.cpp sums
// it after the data-parallel exchange); the optimizer step needs both.
void add_tied_exchange(const Network& net, const Plan& plan, const PipelineWork& w, SimulationResult* result) {
  const int last = plan.pipeline_stages - 1;
  if (last < 1 || !(w.tied_embedding_bytes > 0)) return;
  const double first_ready = result->stage_last_backward_s[0] + result->stage_datap_s[0];
  const double last_ready = result->stage_last_backward_s[last] + result->stage_datap_s[last];
  const simulation::TiedTransfer tied = simulation::tied_transfer_s(net, plan, w);
  result->tied_exchange_s = std::max(tied.down_s, tied.up_s);
  result->iteration_s = std::max({result->iteration_s, first_ready + tied.down_s, last_ready + tied.up_s});
}

}  // namespace

namespace {

// The replicas' pipeline phase under `programs`: each stage's last backward,
// compute and sending (the slowest replica's), and every device's compute.
struct PipelinePhase {
  std::vector<double> last_backward_s, compute_s, sending_s;
  double total_compute = 0;
  std::vector<double> device_compute;  // one per (replica, stage)
};

PipelinePhase play_replicas(const Network& net, const Plan& plan, const PipelineWork& w,
                            const std::vector<std::vector<Step>>& programs, std::vector<TraceEvent>* trace) {
  const int p = plan.pipeline_stages, d = plan.data_parallel;
  PipelinePhase phase;
  phase.last_backward_s.assign(p, 0.0);
  phase.compute_s.assign(p, 0.0);
  phase.sending_s.assign(p, 0.0);
  // Replicas whose devices and links are alike time alike: play each kind once.
  std::map<std::vector<double>, std::vector<double>> played;
  for (int r = 0; r < d; ++r) {
    std::vector<double>& times = played[trace ? std::vector<double>{double(r)} : replica_signature(net, plan, w, r)];
    if (times.empty()) {
      ReplicaRun replica(net, plan, w, programs, r, trace);
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

}  // namespace

SimulationResult simulate(const Network& net, const Plan& plan, const PipelineWork& w, bool record_trace) {
  check_plan_fits(net, plan, w);
  if (w.flushless && (w.schedule != Schedule::one_f_one_b || w.flushes != 1 || w.flushless_ahead < 0 ||
                      w.micro_batches_per_flush < flushless_slots(plan.pipeline_stages, w.flushless_ahead))) {
    throw std::invalid_argument("a flushless pipeline runs 1F1B in one flush per step of at least (1 + ahead) x "
                                "(stages - 1) + 1 = " +
                                std::to_string(flushless_slots(plan.pipeline_stages, std::max(0, w.flushless_ahead))) +
                                " micro-batches");
  }
  const int p = plan.pipeline_stages, d = plan.data_parallel, m = w.micro_batches_per_flush;
  SimulationResult result;
  result.micro_batches = m * w.flushes;
  result.micro_batches_per_flush = m;
  result.flushes = w.flushes;
  std::vector<TraceEvent>* trace = record_trace ? &result.trace : nullptr;
  PipelinePhase phase;
  if (w.flushless) {
    phase = flushless_step(net, plan, w, trace);
  } else {
    std::vector<std::vector<Step>> programs;
    for (int s = 0; s < p; ++s) programs.push_back(pipeline_program(w.schedule, s, p, m, w.flushes));
    phase = play_replicas(net, plan, w, programs, trace);
  }
  result.stage_last_backward_s = phase.last_backward_s;
  for (int s = 0; s < p; ++s) {
    result.pipeline_phase_s = std::max(result.pipeline_phase_s, phase.last_backward_s[s]);
    result.compute_s = std::max(result.compute_s, phase.compute_s[s]);
    result.pipeline_comm_s = std::max(result.pipeline_comm_s, phase.sending_s[s]);
  }
  const double total_compute = phase.total_compute;
  const double least_compute = *std::min_element(phase.device_compute.begin(), phase.device_compute.end());
  if (w.outer.enabled()) {
    simulation::add_outer_sync(net, plan, w, &result);
  } else {
    add_datap_exchanges(net, plan, w, &result);
    if (!w.flushless) add_tied_exchange(net, plan, w, &result);
  }
  if (w.flushless) {  // the tied embedding's swap and the norm travel during the next step
    const simulation::TiedTransfer tied = simulation::tied_transfer_s(net, plan, w);
    result.tied_exchange_s = std::max(tied.down_s, tied.up_s);
    result.iteration_s = std::max(result.iteration_s, result.tied_exchange_s);
  }
  simulation::add_cross_site_traffic(net, plan, w, &result);
  if (result.iteration_s > 0) {
    result.utilisation_mean = total_compute / (static_cast<double>(p) * d) / result.iteration_s;
    result.utilisation_min = least_compute / result.iteration_s;
  }
  result.bubble_fraction =
      result.pipeline_phase_s > 0 ? 1.0 - total_compute / (static_cast<double>(p) * d * result.pipeline_phase_s) : 0.0;
  return result;
}

SimulationResult simulate(const Network& net, const Plan& plan, const SimulationConfig& c, bool record_trace) {
  SimulationResult result = simulate(net, plan, pipeline_work(c, plan.pipeline_stages, plan.data_parallel), record_trace);
  result.flops_per_iteration = iteration_flops(c, c.flops_formula);
  if (result.iteration_s > 0) {
    result.pflops = result.flops_per_iteration / result.iteration_s / 1e15;
    result.tokens_per_s = static_cast<double>(c.global_batch_sequences) * c.model.sequence_length / result.iteration_s;
  }
  return result;
}

namespace simulation {

TiedTransfer tied_transfer_s(const Network& net, const Plan& plan, const PipelineWork& w) {
  TiedTransfer slowest;
  const int last = plan.pipeline_stages - 1;
  if (last < 1 || !(w.tied_embedding_bytes > 0)) return slowest;
  for (int r = 0; r < plan.data_parallel; ++r) {
    const int head = plan.stages[0][r], tail = plan.stages[last][r];
    slowest.down_s = std::max(slowest.down_s, net.transfer_s(head, tail, w.tied_embedding_bytes));
    slowest.up_s = std::max(slowest.up_s, net.transfer_s(tail, head, w.tied_embedding_bytes));
  }
  return slowest;
}

}  // namespace simulation

namespace {
constexpr EnumName<DataParallelScheme> kDataParallelSchemeNames[] = {{DataParallelScheme::paper, "paper"},
                                                                     {DataParallelScheme::ring, "ring"},
                                                                     {DataParallelScheme::central, "central"},
                                                                     {DataParallelScheme::direct, "direct"}};
constexpr EnumName<FlopsFormula> kFlopsFormulaNames[] = {
    {FlopsFormula::paper, "paper"}, {FlopsFormula::megatron, "megatron"}, {FlopsFormula::executed, "executed"}};
}  // namespace

std::string to_string(DataParallelScheme s) { return name_in(kDataParallelSchemeNames, s); }
std::string to_string(FlopsFormula f) { return name_in(kFlopsFormulaNames, f); }

bool parse_dp_scheme(const std::string& text, DataParallelScheme* out) {
  return parse_name_in(kDataParallelSchemeNames, text, out);
}

bool parse_flops_formula(const std::string& text, FlopsFormula* out) {
  return parse_name_in(kFlopsFormulaNames, text, out);
}

}  // namespace geotrain::plan
