// Runs one training step of one pipeline stage: the program of
// plan::pipeline_program (plan/pipeline_schedule.hpp: GPipe or 1F1B; the
// same program the simulator times) executed on a model::Stage, with
// activations and their gradients exchanged through a PipelineLinks
// implementation (MPI between ranks, or in one process for tests).
#pragma once
#include <cstddef>
#include <stdexcept>
#include <functional>
#include <vector>

#include "geotrain/model/gpt.hpp"
#include "geotrain/plan/pipeline_schedule.hpp"
#include "geotrain/runtime/staged_buffer.hpp"
#include "geotrain/runtime/timeline.hpp"

namespace geotrain::runtime {

// This stage's links to its pipeline neighbours. `micro_batch` is the index
// within the step, so messages of different micro-batches never mix.
class PipelineLinks {
 public:
  virtual ~PipelineLinks() = default;
  virtual void send_activation(const float* data, std::size_t count, int micro_batch) = 0;  // to next
  virtual void receive_activation(float* data, std::size_t count, int micro_batch) = 0;     // from previous
  virtual void send_gradient(const float* data, std::size_t count, int micro_batch) = 0;    // to previous
  virtual void receive_gradient(float* data, std::size_t count, int micro_batch) = 0;       // from next
  // Returns when every send so far has left (sends may complete later than
  // they return; their data is the link's own copy).
  virtual void complete_sends() {}
  // True: the pointers are the backend's device memory (NCCL), so the step
  // passes stage buffers directly; false: host memory (MPI), staged.
  virtual bool takes_device_memory() const { return false; }
  // Returns once the message of the next receive_activation (gradient:
  // receive_gradient) of `micro_batch` has begun to arrive, so that the wait
  // for the peer (idle) and the transfer (recv) can be timed apart. Default:
  // at once (the receive itself then holds both).
  virtual void wait_for_arrival(int micro_batch, bool gradient) { (void)micro_batch, (void)gradient; }
  // World ranks of the neighbours, for timing records (-1: none or unknown).
  virtual int previous_peer() const { return -1; }
  virtual int next_peer() const { return -1; }
};

// The links of a pipeline of one stage: it has no neighbours, so any use is
// a logic error.
class NoLinks : public PipelineLinks {
 public:
  void send_activation(const float*, std::size_t, int) override { fail(); }
  void receive_activation(float*, std::size_t, int) override { fail(); }
  void send_gradient(const float*, std::size_t, int) override { fail(); }
  void receive_gradient(float*, std::size_t, int) override { fail(); }

 private:
  [[noreturn]] static void fail() { throw std::logic_error("a single-stage pipeline has no links"); }
};

// Where one stage's step time went (seconds, summed over the step).
struct StageTimes {
  double compute_s = 0;   // forward and backward of this stage
  double pipeline_s = 0;  // waiting for, sending and staging activations and their gradients
};

// Tokens and targets of micro-batch i of this step (host memory, B*T each).
struct MicroBatch {
  const int* tokens;
  const int* targets;
};

class PipelineStep {
 public:
  // `stage_index` in [0, pipeline_stages); the stage's layers are `stage`'s.
  // The step's micro_batches go through the pipeline in `flushes` flushes
  // of micro_batches / flushes each (a GPipe flush that keeps fewer
  // activations alive; the stage needs activation_slots of one flush).
  PipelineStep(model::Stage& stage, kernels::Backend& backend, plan::Schedule schedule, int stage_index,
               int pipeline_stages, int micro_batches, int flushes = 1);
  ~PipelineStep();
  PipelineStep(const PipelineStep&) = delete;
  PipelineStep& operator=(const PipelineStep&) = delete;

  // One step: every micro-batch forward and backward through this stage.
  // Gradients accumulate in the stage (zero them before). `loss_scale` is
  // 1 / (tokens in the whole step, all replicas). Returns the sum of the
  // micro-batches' mean losses on the last stage, 0 elsewhere.
  double run(const std::vector<MicroBatch>& batches, PipelineLinks& links, float loss_scale);

  // Flushless (PipeDream-2BW; schedule 1F1B, slots for every stage): step
  // `step`'s slice of one unbroken 1F1B stream (plan::flushless_program):
  // its backwards, its forwards and the next step's first ones (`next`:
  // that step's batches). `before_compute(ahead)` runs before each forward
  // and backward, ahead = 1 for the next step's: the trainer picks the
  // weights that step reads. The sends are completed only when the slice
  // `drains` (until then the next stage has not asked for all of them).
  // Returns what run() does.
  // set_flushless(ahead) first: the stage must hold plan::flushless_slots.
  double run_flushless(int step, const std::vector<MicroBatch>& batches, const std::vector<MicroBatch>& next,
                       PipelineLinks& links, float loss_scale, bool fresh, bool drains,
                       const std::function<void(int ahead)>& before_compute);
  // pipeline.flushless_ahead: forwards run ahead beyond 1F1B's (the stream's slots).
  void set_flushless(int ahead) {
    ahead_ = ahead;
    slots_ = plan::flushless_slots(stages_, ahead);
  }

  // Forward only (validation): batch `index` through this stage, activations
  // over the same links. Returns the batch's mean loss on the last stage, 0
  // elsewhere. Uses activation slot 0.
  double forward_only(const MicroBatch& batch, PipelineLinks& links, int index);

  // Times of the last run().
  const StageTimes& times() const { return times_; }
  // Records every program step of run() (null: none).
  void set_timeline(Timeline* timeline) { timeline_ = timeline; }
  // Passed to the step's last backward, whose gradient ranges are then final
  // for the step (the overlapped data-parallel sum starts them); empty: none.
  void set_gradient_ready(model::GradientReady ready) { gradient_ready_ = std::move(ready); }
  // Called after every step of the program (a forward, a backward, a
  // message): lets exchanges in flight on the side advance (MPI moves them
  // only inside its calls); empty: none.
  void set_poll(std::function<void()> poll) { poll_ = std::move(poll); }
  // emulation.compute_slowdown: each forward and backward takes `factor`
  // times as long (the extra asleep, charged to compute).
  void set_compute_slowdown(double factor) { slowdown_ = factor; }

  const std::vector<plan::Step>& program() const { return program_; }

 private:
  model::Stage& stage_;
  kernels::Backend& backend_;
  int stage_index_, stages_, micro_batches_, per_flush_, slots_;
  std::vector<plan::Step> program_;
  std::size_t activation_count_;
  float* received_ = nullptr;          // device buffer for incoming activations / gradients
  StagedBuffer staging_;               // for links that take host memory
  StageTimes times_;
  Timeline* timeline_ = nullptr;
  model::GradientReady gradient_ready_;
  std::function<void()> poll_;
  double slowdown_ = 1.0;
  int ahead_ = 0;  // flushless: forwards ahead beyond 1F1B's
  std::size_t last_backward_ = 0;  // index in program_ of the step's last backward

  // Where a program step's micro-batch lives: its batch, its activation
  // slot, its number on the links (message tags), and 1 when it is the next
  // step's.
  struct Placed {
    const MicroBatch* batch;
    int slot, index, ahead;
  };
  double execute(const std::vector<plan::Step>& program, const std::function<Placed(const plan::Step&)>& place,
                 std::size_t last_backward, PipelineLinks& links, float loss_scale,
                 const std::function<void(int)>* before_compute, bool complete_sends);
  // A program step as the timeline shows it: its kind, and the rank at the
  // other end of a message (-1: none).
  struct StepEvent {
    io::EventKind kind;
    int peer;
  };
  // Runs one program step; a forward's loss adds to `loss` when the micro-batch is this step's.
  // `last_backward`: the step's last backward, which reports its gradient ranges.
  StepEvent run_step(const plan::Step& step, const Placed& at, PipelineLinks& links, float loss_scale,
                     bool last_backward, double& loss);
  // received_ <- the link.
  void receive(PipelineLinks& links, int micro_batch, bool gradient);
  // data (device) -> the link.
  void send(PipelineLinks& links, const float* data, int micro_batch, bool gradient);
};

}  // namespace geotrain::runtime
