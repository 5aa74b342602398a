// Local steps (DiLoCo), optionally streamed (Streaming DiLoCo): each replica
// (a whole pipeline) trains alone for `local_steps` inner steps, then the
// replicas sum their pseudo-gradients (the parameters at the last
// synchronisation minus now) and every replica takes the same outer
// Nesterov step from the last synchronised parameters. Data-parallel traffic
// happens once per local_steps steps instead of every step.
//
// Streaming: the stage's parameters are cut into `fragments` equal ranges;
// fragment f is synchronised after the steps k with
// k mod local_steps = fragment_offset(f), its exchange runs during the inner
// steps until the next fragment starts (about local_steps / fragments), and
// its outer step is applied then, with the replica's own change to the
// fragment since the exchange started kept on top (Streaming DiLoCo's
// overlap, nothing dropped; the next pseudo-gradient carries that change).
// Replicas agree again at the end, where every fragment is synchronised at once.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/runtime/gradient_sync.hpp"
#include "geotrain/runtime/timeline.hpp"

namespace geotrain::runtime {

struct LocalStepsSettings {
  int local_steps = 1;  // H
  int fragments = 1;    // F <= H
  double learning_rate = 0.7;
  double momentum = 0.5;  // Nesterov
  int replicas = 1;
  // The stage's first `tied_values` parameters: a tied embedding whose other
  // copy lives on the pipeline's other end (0: none). Both copies must get the
  // same outer step, bit for bit: they sit in fragment 0 at both ends, and
  // are summed apart from the rest of it, so that the encoded sum cuts and
  // scales them the same way whatever else the two stages hold.
  std::size_t tied_values = 0;
};

// Where fragment f's synchronisations fall in each round of H steps:
// floor(f * H / F), distinct for F <= H.
int fragment_offset(const LocalStepsSettings& settings, int fragment);
// The fragment whose synchronisation starts after `completed_steps` steps
// (-1: none). Steps before the first full round start none for offset 0.
int fragment_due(const LocalStepsSettings& settings, int completed_steps);
// fragments + 1 offsets cutting `count` floats into near-equal ranges, the
// first at least `first_at_least` long (the tied embedding, whole in fragment 0).
std::vector<std::size_t> fragment_bounds(std::size_t count, int fragments, std::size_t first_at_least = 0);
// For the log: "fragment 0 after steps 4, 8, 12; fragment 1 after steps 2, 6, 10"
// (the first `rounds` synchronisations of each; when F > 1 each is applied
// when the next starts).
std::string fragment_schedule(const LocalStepsSettings& settings, int rounds);

class OuterOptimizer {
 public:
  OuterOptimizer(kernels::Backend& backend, model::Stage& stage, Collectives& collectives,
                 const LocalStepsSettings& settings);

  // After the inner step that completed `completed_steps` steps: applies the
  // fragment whose exchange ran during that step, starts the one now due.
  // `last`: instead synchronises every fragment not yet synchronised after
  // this step, so that training ends with identical replicas.
  void after_inner_step(int completed_steps, bool last, Timeline* timeline);
  // Lets an exchange in flight advance (between layers).
  void progress() { collectives_.progress_data_parallel(); }
  // True when every replica holds the same parameters (after a
  // synchronisation of the whole stage at once).
  bool replicas_agree() const { return agree_; }

  // State for checkpoints: "anchor", "momentum", and for the fragment in
  // flight its finished sum "pending_<f>" (waited for here: a checkpoint
  // cannot hold a message in flight) and its parameters when sent, "sent_<f>".
  NamedResiduals state();
  // Throws std::invalid_argument on a name or size this optimizer cannot have written.
  void restore(const NamedResiduals& state);

 private:
  std::pair<std::size_t, std::size_t> range(int fragment) const;
  void start(int fragment);
  void finish_and_apply(Timeline* timeline);
  void download_parameters(std::size_t begin, std::size_t end);  // into parameters_

  kernels::Backend& backend_;
  model::Stage& stage_;
  Collectives& collectives_;
  LocalStepsSettings settings_;
  std::vector<std::size_t> bounds_;
  std::vector<float> anchor_, momentum_;  // the whole stage, host memory
  std::vector<float> parameters_;         // host copy of the stage's parameters
  std::vector<float> exchange_;           // pseudo-gradients in flight (their fragments' ranges)
  std::vector<float> sent_;               // the parameters they were taken from
  int in_flight_ = -1;                    // its fragment; -1: none
  bool on_wire_ = false;                  // false: its sum is already in exchange_ (restored)
  bool agree_ = true;
};

}  // namespace geotrain::runtime
