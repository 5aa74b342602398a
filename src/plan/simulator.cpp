#include "geotrain/plan/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "geotrain/common/enum_names.hpp"
#include "geotrain/plan/cost_model.hpp"

namespace geotrain::plan {
namespace {

int layers_of_stage(int layers, int stage, int stages) {
  return layers / stages + (stage < layers % stages ? 1 : 0);
}

constexpr double kUnknown = -1.0;

// The cost model's DATAP (§2.2) of one group alone: a one-stage workload on
// the group's own links, whose c_DP is this stage's gradient.
double paper_datap_s(const Network& network, const std::vector<int>& members, double bytes) {
  Workload group;
  group.data_parallel = static_cast<int>(members.size());
  group.c_dp_bytes = bytes;
  Assignment in_order(members.size());
  std::iota(in_order.begin(), in_order.end(), 0);
  return CostModel(subnetwork(network, members), group).datap(in_order);
}

}  // namespace

double layer_forward_flops(const ModelShape& m, double sequences) {
  const double s = m.sequence_length, h = m.hidden;
  // QKV + output projection 8bsh^2, MLP 16bsh^2, attention scores and
  // weighted sum 4bs^2h: 24bsh^2 (1 + s/(6h)).
  return 24.0 * sequences * s * h * h * (1.0 + s / (6.0 * h));
}

double stage_parameters(const ModelShape& m, int stage, int stages) {
  const double h = m.hidden;
  double params = layers_of_stage(m.layers, stage, stages) * (12.0 * h * h + 13.0 * h);
  if (stage == 0) params += (static_cast<double>(m.vocabulary) + m.sequence_length) * h;
  if (stage == stages - 1) params += 2.0 * h;  // final layer norm
  return params;
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

PipelineWork pipeline_work(const SimulationConfig& c, int stages, int data_parallel) {
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
  const int micro_batches = c.global_batch_sequences / data_parallel / c.micro_batch_sequences;
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
  w.dp_scheme = c.dp_scheme;
  w.overlap_communication = c.overlap_communication;
  const double b = c.micro_batch_sequences;
  const double rate = c.peak_tflops * 1e12 * c.efficiency;  // FLOP/s
  const double layer = layer_forward_flops(m, b);
  const double head = 2.0 * b * m.sequence_length * m.hidden * static_cast<double>(m.vocabulary);
  for (int s = 0; s < stages; ++s) {
    const int l = layers_of_stage(m.layers, s, stages);
    double forward = l * layer, backward = l * (c.recompute ? 3.0 : 2.0) * layer;
    if (c.lm_head && s == stages - 1) {
      forward += head;
      backward += 2.0 * head;
    }
    w.forward_s.push_back(forward / rate);
    w.backward_s.push_back(backward / rate);
    w.gradient_bytes.push_back(stage_parameters(m, s, stages) * m.gradient_bytes);
  }
  w.activation_bytes = b * m.sequence_length * m.hidden * m.activation_bytes;
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

SimulationResult simulate(const Network& net, const Plan& plan, const PipelineWork& w, bool record_trace) {
  const int p = plan.pipeline_stages, d = plan.data_parallel, m = w.micro_batches_per_flush;
  if (p < 1 || d < 1 || static_cast<int>(plan.stages.size()) != p) throw std::invalid_argument("simulate: bad plan shape");
  if (static_cast<int>(w.forward_s.size()) != p || static_cast<int>(w.backward_s.size()) != p ||
      static_cast<int>(w.gradient_bytes.size()) != p) {
    throw std::invalid_argument("simulate: work has " + std::to_string(w.forward_s.size()) + " stages, plan has " +
                                std::to_string(p));
  }
  if (m < 1 || w.flushes < 1) throw std::invalid_argument("simulate: need at least one micro-batch and one flush");
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

  std::vector<std::vector<Step>> programs;
  for (int s = 0; s < p; ++s) programs.push_back(pipeline_program(w.schedule, s, p, m, w.flushes));
  const size_t slots = static_cast<size_t>(m) * w.flushes;

  SimulationResult result;
  result.micro_batches = m * w.flushes;
  result.micro_batches_per_flush = m;
  result.flushes = w.flushes;
  std::vector<double> group_ready(p, 0.0);
  double total_compute = 0;

  for (int r = 0; r < d; ++r) {
    // State of replica r: each device's clock and program counter, each
    // directed link's next free time, every message's post and arrival times.
    std::vector<double> clock(p, 0.0), busy(p, 0.0), sending(p, 0.0);
    std::vector<size_t> pc(p, 0);
    std::vector<char> posted(p, 0);  // blocking mode: the current batch is posted
    // Message (direction, boundary b between stages b and b+1, slot).
    struct Message {
      double sender_post = kUnknown, receiver_post = kUnknown, arrival = kUnknown;
    };
    std::vector<Message> messages(2 * static_cast<size_t>(std::max(p - 1, 1)) * slots);
    std::vector<double> link_free(2 * static_cast<size_t>(std::max(p - 1, 1)), 0.0);
    size_t remaining = 0;
    for (const auto& prog : programs) remaining += prog.size();

    auto is_comm = [](StepKind k) { return k != StepKind::forward && k != StepKind::backward; };
    // The message a send/recv step of stage s refers to, and the sender's stage.
    auto message_of = [&](int s, const Step& step, int* sender, int* receiver, int* link) -> Message& {
      const size_t slot = static_cast<size_t>(step.flush) * m + step.micro_batch;
      const bool forward = step.kind == StepKind::send_activation || step.kind == StepKind::recv_activation;
      const bool sends = step.kind == StepKind::send_activation || step.kind == StepKind::send_gradient;
      const int boundary = forward ? (sends ? s : s - 1) : (sends ? s - 1 : s);
      *sender = forward ? boundary : boundary + 1;
      *receiver = forward ? boundary + 1 : boundary;
      *link = 2 * boundary + (forward ? 0 : 1);
      return messages[(static_cast<size_t>(*link)) * slots + slot];
    };
    // Starts a message once it may start: the sender has posted it and, for
    // blocking (rendezvous) p2p, the receiver too; the link sends one message
    // at a time (messages on a link are posted in order).
    auto resolve = [&](Message& msg, int sender, int receiver, int link, const Step& step) {
      if (msg.arrival != kUnknown || msg.sender_post == kUnknown) return;
      double start = msg.sender_post;
      if (!w.overlap_communication) {
        if (msg.receiver_post == kUnknown) return;
        start = std::max(start, msg.receiver_post);
      }
      const int u = plan.stages[sender][r], v = plan.stages[receiver][r];
      const double serialise = w.activation_bytes / net.bandwidth(u, v);
      start = std::max(start, link_free[link]);
      link_free[link] = start + serialise;  // the link is busy while the bytes go out
      msg.arrival = start + serialise + net.latency(u, v);
      sending[sender] += serialise + net.latency(u, v);
      if (record_trace) {
        Step sent = step;
        sent.kind = step.kind == StepKind::recv_activation ? StepKind::send_activation
                    : step.kind == StepKind::recv_gradient ? StepKind::send_gradient : step.kind;
        result.trace.push_back({r, sender, sent, start, msg.arrival});
      }
    };

    while (remaining > 0) {
      bool progress = false;
      for (int s = 0; s < p; ++s) {
        const auto& prog = programs[s];
        while (pc[s] < prog.size()) {
          const Step& step = prog[pc[s]];
          size_t advance = 1;
          if (step.kind == StepKind::forward || step.kind == StepKind::backward) {
            const double duration = step.kind == StepKind::forward ? w.forward_s[s] : w.backward_s[s];
            if (record_trace) result.trace.push_back({r, s, step, clock[s], clock[s] + duration});
            clock[s] += duration;
            busy[s] += duration;
          } else if (w.overlap_communication) {
            // Sends go out on the communication stream; receives are posted
            // early, so only their arrival matters.
            int sender, receiver, link;
            Message& msg = message_of(s, step, &sender, &receiver, &link);
            if (sender == s) {
              msg.sender_post = clock[s];
              resolve(msg, sender, receiver, link, step);
            } else if (msg.arrival == kUnknown) {
              break;
            } else {
              clock[s] = std::max(clock[s], msg.arrival);
            }
          } else {
            // Blocking p2p as Megatron-LM does it: consecutive sends and
            // receives form one batch, posted together; each message starts
            // when both ends have posted it; the device waits for the batch.
            size_t end = pc[s];
            while (end < prog.size() && is_comm(prog[end].kind)) ++end;
            advance = end - pc[s];
            bool complete = true;
            double done_at = clock[s];
            for (size_t i = pc[s]; i < end; ++i) {
              int sender, receiver, link;
              Message& msg = message_of(s, prog[i], &sender, &receiver, &link);
              if (!posted[s]) (sender == s ? msg.sender_post : msg.receiver_post) = clock[s];
              resolve(msg, sender, receiver, link, prog[i]);
              if (msg.arrival == kUnknown) complete = false;
              else done_at = std::max(done_at, msg.arrival);
            }
            if (!posted[s]) {
              posted[s] = 1;
              progress = true;
            }
            if (!complete) break;
            posted[s] = 0;
            clock[s] = done_at;
          }
          pc[s] += advance;
          remaining -= advance;
          progress = true;
        }
      }
      if (!progress) throw std::logic_error("simulate: pipeline program deadlocked");
    }
    for (int s = 0; s < p; ++s) {
      // With overlap the clock stops at the last backward (its gradient may
      // still be on the wire to s-1, on another link); without, after the send.
      group_ready[s] = std::max(group_ready[s], clock[s]);
      result.pipeline_phase_s = std::max(result.pipeline_phase_s, clock[s]);
      result.compute_s = std::max(result.compute_s, busy[s]);
      result.pipeline_comm_s = std::max(result.pipeline_comm_s, sending[s]);
      total_compute += busy[s];
    }
  }

  result.stage_last_backward_s = group_ready;
  result.iteration_s = result.pipeline_phase_s;
  for (int s = 0; s < p; ++s) {
    const double exchange = datap_exchange_s(net, plan.stages[s], w.gradient_bytes[s], w.dp_scheme);
    result.stage_datap_s.push_back(exchange);
    result.datap_comm_s = std::max(result.datap_comm_s, exchange);
    result.iteration_s = std::max(result.iteration_s, group_ready[s] + exchange);
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
