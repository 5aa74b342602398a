// The work of one iteration from the model and the batch: each stage's
// forward and backward time, the bytes on its links and in its sums, and
// the FLOPs that the throughput is counted in.
#include <algorithm>
#include <cmath>

#include "geotrain/common/errors.hpp"
#include "geotrain/plan/simulator.hpp"

namespace geotrain::plan {
namespace {

int layers_of_stage(int layers, int stage, int stages) {
  return layers / stages + (stage < layers % stages ? 1 : 0);
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
    throw InputError(std::to_string(given.size()) + " layer counts for " + std::to_string(stages) + " stages");
  }
  long total = 0;
  for (int l : given) {
    if (l < 0) throw InputError("a stage cannot hold " + std::to_string(l) + " layers");
    total += l;
  }
  if (total != m.layers) {
    throw InputError("the stages hold " + std::to_string(total) + " layers but the model has " +
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
  if (stages < 1 || data_parallel < 1) throw InputError("pipeline stages and data-parallel degree must be >= 1");
  if (m.layers < stages) {
    throw InputError("the model has " + std::to_string(m.layers) + " layers, fewer than the " +
                     std::to_string(stages) + " pipeline stages");
  }
  if (c.micro_batch_sequences < 1 || c.global_batch_sequences < 1) throw InputError("batch sizes must be >= 1");
  if (c.global_batch_sequences % (data_parallel * c.micro_batch_sequences) != 0) {
    throw InputError("global batch " + std::to_string(c.global_batch_sequences) +
                     " is not a multiple of data-parallel degree x micro-batch = " +
                     std::to_string(data_parallel) + " x " + std::to_string(c.micro_batch_sequences));
  }
  if (!(c.peak_tflops > 0) || !(c.efficiency > 0) || !std::isfinite(c.peak_tflops) || !std::isfinite(c.efficiency)) {
    throw InputError("peak TFLOPS and efficiency must be finite and > 0");
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
    throw InputError(std::to_string(micro_batches) + " micro-batches per replica are not a multiple of " +
                     std::to_string(flush) + " micro-batches per flush");
  }
  PipelineWork w;
  w.micro_batches_per_flush = flush;
  w.flushes = micro_batches / flush;
  w.schedule = c.schedule;
  w.flushless = c.flushless;
  w.flushless_ahead = c.flushless_ahead;
  w.dp_scheme = c.dp_scheme;
  w.exchange_costs = c.exchange_costs;
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
    if (!(tflops > 0) || !std::isfinite(tflops)) throw InputError("device TFLOPS must be finite and > 0");
    w.device_time_scale.push_back(c.peak_tflops / tflops);
  }
  return w;
}

}  // namespace geotrain::plan
