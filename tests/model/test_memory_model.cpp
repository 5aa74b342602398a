// The planner's memory model (plan/memory_model.hpp) against what the
// runtime really allocates for a stage: model::Stage, its AdamW moments and
// the pipeline's receive buffer, counted by a backend that only allocates.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <unordered_map>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/model/optimizer.hpp"
#include "geotrain/model/stage_split.hpp"
#include "geotrain/plan/memory_model.hpp"
#include "geotrain/plan/pipeline_schedule.hpp"
#include "geotrain/runtime/pipeline.hpp"

namespace geotrain {
namespace {

// Allocates host memory and counts its bytes; computing is not needed to
// build a stage, so every op fails loudly.
class CountingBackend final : public kernels::Backend {
 public:
  ~CountingBackend() override = default;
  kernels::DeviceKind kind() const override { return kernels::DeviceKind::cpu; }
  std::string description() const override { return "counting"; }
  float* alloc(std::size_t count) override { return static_cast<float*>(take(count * sizeof(float))); }
  int* alloc_tokens(std::size_t count) override { return static_cast<int*>(take(count * sizeof(int))); }
  std::uint16_t* alloc_bf16(std::size_t count) override {
    return static_cast<std::uint16_t*>(take(count * sizeof(std::uint16_t)));
  }
  void release(void* p) override {
    live_ -= sizes_.at(p);
    sizes_.erase(p);
    std::free(p);
  }
  double live_bytes() const { return static_cast<double>(live_); }

  [[noreturn]] static void no_op() { throw std::logic_error("CountingBackend: no compute"); }
  void upload(float*, const float*, std::size_t) override { no_op(); }
  void upload_tokens(int*, const int*, std::size_t) override { no_op(); }
  void download(float*, const float*, std::size_t) override { no_op(); }
  void fill_zero(float*, std::size_t) override { no_op(); }
  void synchronize() override {}
  void to_bf16(std::uint16_t*, const float*, std::size_t) override { no_op(); }
  void from_bf16(float*, const std::uint16_t*, std::size_t) override { no_op(); }
  void embedding_forward(float*, const int*, const float*, const float*, int, int, int) override { no_op(); }
  void embedding_backward(float*, float*, const float*, const int*, int, int, int) override { no_op(); }
  void embedding_shard_forward(float*, const int*, const float*, const float*, int, int, int, int, int) override {
    no_op();
  }
  void embedding_shard_backward(float*, float*, const float*, const int*, int, int, int, int, int) override {
    no_op();
  }
  void layernorm_forward(float*, float*, float*, const float*, const float*, const float*, int, int) override {
    no_op();
  }
  void layernorm_backward(float*, float*, float*, const float*, const float*, const float*, const float*,
                          const float*, int, int) override {
    no_op();
  }
  void residual_layernorm_forward(float*, float*, float*, float*, const float*, const float*, const float*,
                                  const float*, int, int) override {
    no_op();
  }
  void matmul_gelu_forward(float*, float*, const float*, const float*, const float*, int, int, int) override {
    no_op();
  }
  void matmul_gelu_backward(float*, float*, float*, float*, const float*, const float*, const float*, const float*,
                            int, int, int) override {
    no_op();
  }
  void matmul_forward(float*, const float*, const float*, const float*, int, int, int) override { no_op(); }
  void matmul_backward(float*, float*, float*, const float*, const float*, const float*, int, int, int) override {
    no_op();
  }
  void set_matmul_precision(MatmulPrecision) override {}
  void attention_forward(float*, float*, const float*, int, int, int, int) override { no_op(); }
  void attention_backward(float*, float*, const float*, const float*, const float*, const float*, int, int, int,
                          int) override {
    no_op();
  }
  void gelu_forward(float*, const float*, std::size_t) override { no_op(); }
  void gelu_backward(float*, const float*, const float*, std::size_t) override { no_op(); }
  void residual_forward(float*, const float*, const float*, std::size_t) override { no_op(); }
  void accumulate(float*, const float*, std::size_t) override { no_op(); }
  void scale(float*, float, std::size_t) override { no_op(); }
  double sum_of_squares(const float*, std::size_t) override { no_op(); }
  void crossentropy_forward(float*, const float*, const int*, int, int) override { no_op(); }
  void crossentropy_backward(float*, const float*, const int*, float, int, int) override { no_op(); }
  void crossentropy_shard_max(float*, const float*, int, int) override { no_op(); }
  void crossentropy_shard_statistics(float*, const float*, const int*, const float*, int, int, int) override {
    no_op();
  }
  void crossentropy_shard_backward(float*, const float*, const int*, const float*, const float*, float, int, int,
                                   int) override {
    no_op();
  }
  void adamw_update(float*, const float*, float*, float*, std::size_t, float, float, float, float, float,
                    int) override {
    no_op();
  }

 private:
  void* take(std::size_t bytes) {
    void* p = std::calloc(bytes ? bytes : 1, 1);
    sizes_[p] = bytes;
    live_ += bytes;
    return p;
  }
  std::unordered_map<void*, std::size_t> sizes_;
  std::size_t live_ = 0;
};

struct Case {
  int layers, stages, micro_batch, micro_batches;
  plan::Schedule schedule;
  std::vector<int> layers_per_stage = {};  // empty: the even split
};

// Every stage of every case, tied and untied head: the model's total equals
// the runtime's bytes.
void check_against_runtime(const ModelShape& shape, ActivationStorage storage) {
  plan::MemorySettings settings;  // the runtime's: no recomputation
  settings.reserved_bytes = 0;
  settings.activation_storage = storage;
  // The last case: an embedding-only first stage and a head-only last one.
  for (const Case& c : {Case{5, 1, 2, 3, plan::Schedule::gpipe}, Case{5, 2, 1, 4, plan::Schedule::gpipe},
                        Case{5, 3, 2, 6, plan::Schedule::one_f_one_b, {1, 3, 1}},
                        Case{5, 2, 3, 1, plan::Schedule::one_f_one_b},
                        Case{5, 4, 1, 4, plan::Schedule::gpipe, {0, 3, 2, 0}}}) {
    const auto specs = model::split_layers(c.layers, c.stages, c.layers_per_stage);
    for (int s = 0; s < c.stages; ++s) {
      SCOPED_TRACE("stages " + std::to_string(c.stages) + ", stage " + std::to_string(s));
      CountingBackend backend;
      const int slots = plan::activation_slots(c.schedule, c.micro_batches, c.stages);
      {
        model::Stage stage(shape, specs[s], backend, c.micro_batch, slots, nullptr, storage);
        model::AdamW optimizer(backend, stage, {});
        runtime::PipelineStep step(stage, backend, c.schedule, s, c.stages, c.micro_batches);
        const plan::StagePart part{specs[s].last_layer - specs[s].first_layer, s == 0, s == c.stages - 1};
        const plan::StageMemory predicted = plan::stage_memory(shape, part, c.micro_batch, slots, settings);
        EXPECT_EQ(predicted.parameters, static_cast<double>(stage.parameter_count()));
        EXPECT_EQ(predicted.total_bytes(), backend.live_bytes());
      }
      EXPECT_EQ(backend.live_bytes(), 0.0);  // and the counter saw every release
    }
  }
}

TEST(MemoryModel, EqualsWhatTheRuntimeAllocatesPerStage) {
  for (const ActivationStorage storage : {ActivationStorage::fp32, ActivationStorage::bf16}) {
    SCOPED_TRACE("activation storage " + to_string(storage));
    ModelShape shape{"small", 5, 64, 4, 97, 32};
    check_against_runtime(shape, storage);
    shape.tied_head = false;
    check_against_runtime(shape, storage);
  }
}

// The fused attention keeps lse[B,NH,T] and a B*NH*T scratch where the
// former one kept B*NH*T*T probabilities per layer and as much scratch: every
// term of a stage's activations and workspace is now linear in T. At GPT-2
// 124M, B = 16, T = 1024 that is 12 x 0.79 MB + 0.79 MB instead of
// 12 x 805 MB + 805 MB (1024x less).
TEST(MemoryModel, AttentionStateGrowsLinearlyWithTheSequence) {
  plan::MemorySettings settings;
  settings.reserved_bytes = 0;
  ModelShape shape{"gpt2-124m", 12, 768, 12, 50257, 1024};
  const plan::StagePart whole{12, true, true};
  const plan::StageMemory at_1024 = plan::stage_memory(shape, whole, 16, 1, settings);
  shape.sequence_length = 2048;
  const plan::StageMemory at_2048 = plan::stage_memory(shape, whole, 16, 1, settings);
  EXPECT_DOUBLE_EQ(at_2048.activation_bytes, 2 * at_1024.activation_bytes);
  EXPECT_DOUBLE_EQ(at_2048.workspace_bytes, 2 * at_1024.workspace_bytes);
}

}  // namespace
}  // namespace geotrain
