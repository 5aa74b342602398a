#include "geotrain/runtime/local_steps.hpp"

#include <algorithm>
#include <stdexcept>

namespace geotrain::runtime {

int fragment_offset(const LocalStepsSettings& s, int fragment) {
  return static_cast<int>(static_cast<long long>(fragment) * s.local_steps / s.fragments);
}

int fragment_due(const LocalStepsSettings& s, int completed_steps) {
  if (completed_steps <= 0) return -1;
  const int phase = completed_steps % s.local_steps;
  for (int f = 0; f < s.fragments; ++f) {
    if (fragment_offset(s, f) == phase) return f;
  }
  return -1;
}

std::vector<std::size_t> fragment_bounds(std::size_t count, int fragments, std::size_t first_at_least) {
  std::vector<std::size_t> bounds;
  for (int f = 0; f <= fragments; ++f) {
    const std::size_t even = count * static_cast<std::size_t>(f) / fragments;
    bounds.push_back(f == 0 ? 0 : std::max(even, std::min(first_at_least, count)));
  }
  return bounds;
}

std::string fragment_schedule(const LocalStepsSettings& s, int rounds) {
  std::vector<std::string> lines(s.fragments);
  std::vector<int> seen(s.fragments, 0);
  for (int step = 1; step <= (rounds + 1) * s.local_steps; ++step) {
    const int f = fragment_due(s, step);
    if (f < 0 || seen[f] == rounds) continue;
    lines[f] += (seen[f]++ == 0 ? "" : ", ") + std::to_string(step);
  }
  std::string text;
  for (int f = 0; f < s.fragments; ++f) {
    text += (f == 0 ? "" : "; ") + std::string("fragment ") + std::to_string(f) + " after steps " + lines[f];
  }
  return text;
}

OuterOptimizer::OuterOptimizer(kernels::Backend& backend, model::Stage& stage, Collectives& collectives,
                               const LocalStepsSettings& settings)
    : backend_(backend),
      stage_(stage),
      collectives_(collectives),
      settings_(settings),
      bounds_(fragment_bounds(stage.parameter_count(), settings.fragments, settings.tied_values)),
      anchor_(stage.parameter_count()),
      momentum_(stage.parameter_count(), 0.0f),
      parameters_(stage.parameter_count()),
      exchange_(stage.parameter_count()),
      sent_(stage.parameter_count()) {
  // The anchor is the parameters as training starts (drawn, resumed or loaded).
  download_parameters(0, parameters_.size());
  anchor_ = parameters_;
}

void OuterOptimizer::download_parameters(std::size_t begin, std::size_t end) {
  backend_.download(parameters_.data() + begin, stage_.params() + begin, end - begin);
}

void OuterOptimizer::after_inner_step(int completed_steps, bool last, Timeline* timeline) {
  const int due = fragment_due(settings_, completed_steps);
  const bool whole = settings_.fragments == 1;
  // The fragment in flight is applied when the next one starts (its window:
  // the steps between them) or at the end.
  if (in_flight_ >= 0 && (due >= 0 || last)) finish_and_apply(timeline);
  if (last && !(whole && due >= 0)) {
    // The whole stage once more, in one exchange (one latency, not one per
    // fragment): training ends with identical replicas.
    start(whole ? 0 : settings_.fragments);
    finish_and_apply(timeline);
    agree_ = true;
    return;
  }
  if (due >= 0) {
    start(due);
    if (whole) finish_and_apply(timeline);  // nothing to overlap with
  }
  agree_ = whole && due >= 0;
}

// Fragment `fragments` (past the last) is the whole stage, with error
// feedback of its own.
std::pair<std::size_t, std::size_t> OuterOptimizer::range(int fragment) const {
  if (fragment == settings_.fragments) return {0, bounds_.back()};
  return {bounds_[fragment], bounds_[fragment + 1]};
}

void OuterOptimizer::start(int fragment) {
  const auto [begin, end] = range(fragment);
  download_parameters(begin, end);
  for (std::size_t i = begin; i < end; ++i) {
    exchange_[i] = anchor_[i] - parameters_[i];
    sent_[i] = parameters_[i];
  }
  in_flight_ = fragment;
  on_wire_ = true;
  const std::size_t tied = begin == 0 ? std::min(settings_.tied_values, end) : 0;
  // The embedding's own slot: past the fragments' (0 .. F - 1) and the whole stage's (F).
  if (tied > 0) collectives_.start_data_parallel_fragment(settings_.fragments + 1, exchange_.data(), tied);
  collectives_.start_data_parallel_fragment(fragment, exchange_.data() + begin + tied, end - begin - tied);
}

void OuterOptimizer::finish_and_apply(Timeline* timeline) {
  const auto [begin, end] = range(in_flight_);
  if (on_wire_) {
    const auto wait = Timeline::Clock::now();
    collectives_.finish_data_parallel_buckets();
    if (timeline) {
      timeline->record(io::EventKind::allreduce, wait, Timeline::Clock::now(), -1,
                       static_cast<std::int64_t>(sizeof(float) * (end - begin)));
    }
    on_wire_ = false;
  }
  const float mean = 1.0f / static_cast<float>(settings_.replicas);
  const auto lr = static_cast<float>(settings_.learning_rate), mu = static_cast<float>(settings_.momentum);
  for (std::size_t i = begin; i < end; ++i) {
    const float pseudo_gradient = exchange_[i] * mean;
    momentum_[i] = mu * momentum_[i] + pseudo_gradient;
    anchor_[i] -= lr * (pseudo_gradient + mu * momentum_[i]);  // Nesterov
  }
  // The replica's own progress since the exchange started stays on top of
  // the outer result (none when applied at once: the difference is 0 exactly).
  download_parameters(begin, end);
  for (std::size_t i = begin; i < end; ++i) parameters_[i] = anchor_[i] + (parameters_[i] - sent_[i]);
  backend_.upload(stage_.params() + begin, parameters_.data() + begin, end - begin);
  in_flight_ = -1;
}

NamedResiduals OuterOptimizer::state() {
  NamedResiduals named = {{"anchor", anchor_}, {"momentum", momentum_}};
  if (in_flight_ >= 0) {
    if (on_wire_) {
      collectives_.finish_data_parallel_buckets();
      on_wire_ = false;
    }
    const auto [begin, end] = range(in_flight_);
    const auto part = [&](const std::vector<float>& of) {
      return std::vector<float>(of.begin() + static_cast<std::ptrdiff_t>(begin), of.begin() + static_cast<std::ptrdiff_t>(end));
    };
    named.emplace_back("pending_" + std::to_string(in_flight_), part(exchange_));
    named.emplace_back("sent_" + std::to_string(in_flight_), part(sent_));
  }
  return named;
}

void OuterOptimizer::restore(const NamedResiduals& state) {
  for (const auto& [name, values] : state) {
    auto expect = [&](std::size_t size) {
      if (values.size() != size) {
        throw std::invalid_argument("local-steps state '" + name + "' has " + std::to_string(values.size()) +
                                    " values, expected " + std::to_string(size));
      }
    };
    if (name == "anchor" || name == "momentum") {
      expect(anchor_.size());
      (name == "anchor" ? anchor_ : momentum_) = values;
    } else if (name.rfind("pending_", 0) == 0 || name.rfind("sent_", 0) == 0) {
      const bool pending = name[0] == 'p';
      const int f = std::stoi(name.substr(pending ? 8 : 5));
      if (f < 0 || f >= settings_.fragments) throw std::invalid_argument("local-steps state '" + name + "': no such fragment");
      expect(bounds_[f + 1] - bounds_[f]);
      std::copy(values.begin(), values.end(), (pending ? exchange_ : sent_).begin() + bounds_[f]);
      in_flight_ = f;
      on_wire_ = false;
    } else {
      throw std::invalid_argument("local-steps state '" + name + "': unknown");
    }
  }
}

}  // namespace geotrain::runtime
