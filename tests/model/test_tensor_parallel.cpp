// Tensor parallelism inside a stage: t ranks, here threads of one process
// summing through an in-memory group, must compute what one rank computes
// with the whole stage: the same loss and, put back together, the same
// gradient. The whole stage is itself checked against PyTorch
// (test_pytorch_parity) and finite differences (test_gradients).
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "geotrain/common/errors.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"

namespace geotrain::model {
namespace {

TEST(TensorSlice, CopiesTheBlocksOfRowsAndColumnsItNames) {
  // A [6, 2] tensor in three blocks of two rows; rank 1 of 2 holds row 1 of each block.
  const std::vector<float> whole = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<float> part(6);
  copy_slice_out({0, 3, 1, 1}, {6, 2}, whole.data(), part.data());
  EXPECT_EQ(part, (std::vector<float>{2, 3, 6, 7, 10, 11}));
  // A [2, 4] tensor, columns 2..3 of one block.
  std::vector<float> columns(4);
  copy_slice_out({1, 1, 2, 2}, {2, 4}, std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}.data(), columns.data());
  EXPECT_EQ(columns, (std::vector<float>{2, 3, 6, 7}));
  std::vector<float> back(12, -1);
  copy_slice_in({0, 3, 1, 1}, {6, 2}, part.data(), back.data());
  EXPECT_EQ(back, (std::vector<float>{-1, -1, 2, 3, -1, -1, 6, 7, -1, -1, 10, 11}));
  EXPECT_THROW(copy_slice_out({0, 3, 1, 2}, {6, 2}, whole.data(), part.data()), InputError);
}

TEST(TensorSlice, VocabularyRangesPartitionTheVocabulary) {
  for (int V : {11, 256, 50257}) {
    for (int t : {1, 2, 3, 4, 8}) {
      int next = 0;
      for (int r = 0; r < t; ++r) {
        const VocabularyRange range = vocabulary_range(V, t, r);
        EXPECT_EQ(range.begin, next);
        EXPECT_GE(range.rows, V / t);
        EXPECT_LE(range.rows, V / t + 1);
        next = range.begin + range.rows;
      }
      EXPECT_EQ(next, V);
    }
  }
}

// t threads; each sum adds the members' buffers in rank order, so every
// member gets the same bits (as the MPI group does).
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), barrier_(size), buffers_(size), values_(size) {}
  class Member : public TensorGroup {
   public:
    Member(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
    int size() const override { return group_.size_; }
    int rank() const override { return rank_; }
    void sum(float* data, std::size_t count) override {
      combine(data, count, [](float a, float b) { return a + b; });
    }
    void sum_host(float* data, std::size_t count) override { sum(data, count); }
    void max(float* data, std::size_t count) override {
      combine(data, count, [](float a, float b) { return a > b ? a : b; });
    }
    void sum_values(double* values, int count) override {
      group_.values_[rank_].assign(values, values + count);
      group_.barrier_.arrive_and_wait();
      for (int i = 0; i < count; ++i) {
        double total = 0;
        for (const auto& member : group_.values_) total += member[i];
        values[i] = total;
      }
      group_.barrier_.arrive_and_wait();
    }

   private:
    void combine(float* data, std::size_t count, const std::function<float(float, float)>& op) {
      group_.buffers_[rank_] = data;
      group_.barrier_.arrive_and_wait();
      std::vector<float> result(group_.buffers_[0], group_.buffers_[0] + count);
      for (int m = 1; m < group_.size_; ++m) {
        for (std::size_t i = 0; i < count; ++i) result[i] = op(result[i], group_.buffers_[m][i]);
      }
      group_.barrier_.arrive_and_wait();  // every member has read every buffer
      std::copy(result.begin(), result.end(), data);
    }
    ThreadGroup& group_;
    int rank_;
  };

 private:
  int size_;
  std::barrier<> barrier_;
  std::vector<float*> buffers_;
  std::vector<std::vector<double>> values_;
};

const ModelShape kSmall{.name = "tp-check", .layers = 2, .hidden = 16, .heads = 4, .vocabulary = 11,
                       .sequence_length = 6};
const ModelShape kSmallUntied{.name = "tp-check-untied", .layers = 2, .hidden = 16, .heads = 4, .vocabulary = 11,
                              .sequence_length = 6, .tied_head = false};

struct Result {
  double loss = 0;
  std::vector<float> gradient;  // the whole stage's layout
  double squares = 0;           // gradient_squares
};

// Two micro-batches through `spec` (t ranks); the gradient put back into the
// whole stage's layout from every rank's part (replicated tensors from every
// rank must agree).
Result run_stage(const ModelShape& config, StageSpec spec, int t, ActivationStorage storage) {
  const int B = 2, T = config.sequence_length;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> token(0, config.vocabulary - 1);
  std::vector<int> tokens(2 * B * T), targets(2 * B * T);
  for (auto& x : tokens) x = token(rng);
  for (auto& x : targets) x = token(rng);
  StageSpec whole_spec = spec;
  whole_spec.tensor_parallel = 1, whole_spec.tensor_rank = 0;
  const std::vector<ParameterView> whole = parameter_layout(config, whole_spec);
  std::size_t whole_count = 0;
  for (const auto& v : whole) whole_count += v.count;
  // Random values everywhere (GPT-2's initial biases are zero, which would
  // hide a bias added by every rank instead of one).
  std::vector<float> whole_params(whole_count);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (auto& x : whole_params) x = normal(rng);

  Result result;
  result.gradient.assign(whole_count, std::nanf(""));
  std::vector<std::vector<float>> replicated_copies(t);
  std::vector<double> losses(t), squares(t);
  ThreadGroup group(t);
  auto rank_main = [&](int r) {
    auto backend = kernels::make_cpu_backend();
    ThreadGroup::Member member(group, r);
    StageSpec mine = spec;
    mine.tensor_parallel = t, mine.tensor_rank = r;
    Stage stage(config, mine, *backend, B, 2, t > 1 ? &member : nullptr, storage);
    std::vector<float> params(stage.parameter_count());
    for (std::size_t i = 0; i < stage.parameters().size(); ++i) {
      const ParameterView& v = stage.parameters()[i];
      const float* source = whole_params.data() + whole[i].offset;
      if (v.slice.split()) {
        copy_slice_out(v.slice, v.shape, source, params.data() + v.offset);
      } else {
        std::copy_n(source, v.count, params.data() + v.offset);
      }
    }
    backend->upload(stage.params(), params.data(), params.size());
    stage.zero_grads();
    double loss = 0;
    for (int slot = 0; slot < 2; ++slot) {
      loss += stage.forward(slot, tokens.data() + slot * B * T, nullptr, targets.data() + slot * B * T);
    }
    for (int slot = 1; slot >= 0; --slot) stage.backward(slot, nullptr, 1.0f / (2 * B * T));
    losses[r] = loss / 2;
    std::vector<float> grads(stage.parameter_count());
    backend->download(grads.data(), stage.grads(), grads.size());
    squares[r] = gradient_squares(stage, *backend, stage.grads(), nullptr);
    // Each rank writes its own parts; replicated tensors are kept per rank to compare.
    std::vector<float>& replicated = replicated_copies[r];
    replicated.assign(whole_count, std::nanf(""));
    for (std::size_t i = 0; i < stage.parameters().size(); ++i) {
      const ParameterView& v = stage.parameters()[i];
      const ParameterView& w = whole[i];
      ASSERT_EQ(v.name, w.name);
      if (v.slice.split()) {
        copy_slice_in(v.slice, v.shape, grads.data() + v.offset, result.gradient.data() + w.offset);
      } else {
        std::copy_n(grads.data() + v.offset, v.count, replicated.data() + w.offset);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < t; ++r) threads.emplace_back(rank_main, r);
  for (auto& thread : threads) thread.join();
  for (std::size_t i = 0; i < whole_count; ++i) {
    if (!std::isnan(replicated_copies[0][i])) {
      for (int r = 1; r < t; ++r) EXPECT_EQ(replicated_copies[r][i], replicated_copies[0][i]) << "float " << i;
      result.gradient[i] = replicated_copies[0][i];
    }
  }
  for (int r = 1; r < t; ++r) {
    EXPECT_EQ(losses[r], losses[0]);
    EXPECT_EQ(squares[r], squares[0]);
  }
  result.loss = losses[0];
  result.squares = squares[0];
  return result;
}

void expect_same_as_whole(const ModelShape& config, const StageSpec& spec, int t,
                          ActivationStorage storage = ActivationStorage::fp32) {
  const Result whole = run_stage(config, spec, 1, storage);
  const Result split = run_stage(config, spec, t, storage);
  EXPECT_NEAR(split.loss, whole.loss, 1e-5 * std::abs(whole.loss));
  EXPECT_NEAR(split.squares, whole.squares, 1e-4 * whole.squares);
  ASSERT_EQ(split.gradient.size(), whole.gradient.size());
  double scale = 0;
  for (float g : whole.gradient) scale = std::max(scale, static_cast<double>(std::abs(g)));
  for (std::size_t i = 0; i < whole.gradient.size(); ++i) {
    ASSERT_FALSE(std::isnan(split.gradient[i])) << "float " << i << " held by no rank";
    EXPECT_NEAR(split.gradient[i], whole.gradient[i], 1e-5 * scale) << "float " << i;
  }
}

class TensorParallelStage : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallelStage, WholeModelMatchesOneRank) { expect_same_as_whole(kSmall, StageSpec::whole(kSmall), GetParam()); }

TEST_P(TensorParallelStage, UntiedHeadMatchesOneRank) {
  expect_same_as_whole(kSmallUntied, StageSpec::whole(kSmallUntied), GetParam());
}

// bf16 activation storage: each rank stores its part of the split tensors.
TEST_P(TensorParallelStage, Bf16ActivationStorageMatchesOneRank) {
  expect_same_as_whole(kSmall, StageSpec::whole(kSmall), GetParam(), ActivationStorage::bf16);
}

INSTANTIATE_TEST_SUITE_P(Degrees, TensorParallelStage, ::testing::Values(2, 4));

TEST(TensorParallelStage, InitialValuesAreTheWholeModelsSlices) {
  auto whole_backend = kernels::make_cpu_backend();
  Stage whole(kSmall, StageSpec::whole(kSmall), *whole_backend, 1, 1);
  whole.initialize(3);
  std::vector<float> whole_params(whole.parameter_count());
  whole_backend->download(whole_params.data(), whole.params(), whole_params.size());
  ThreadGroup group(2);
  ThreadGroup::Member member(group, 1);
  StageSpec spec = StageSpec::whole(kSmall);
  spec.tensor_parallel = 2, spec.tensor_rank = 1;
  auto backend = kernels::make_cpu_backend();
  Stage part(kSmall, spec, *backend, 1, 1, &member);
  part.initialize(3);
  std::vector<float> params(part.parameter_count()), expected(part.parameter_count());
  backend->download(params.data(), part.params(), params.size());
  for (std::size_t i = 0; i < part.parameters().size(); ++i) {
    const ParameterView& v = part.parameters()[i];
    const float* source = whole_params.data() + whole.parameters()[i].offset;
    if (v.slice.split()) copy_slice_out(v.slice, v.shape, source, expected.data() + v.offset);
    else std::copy_n(source, v.count, expected.data() + v.offset);
  }
  EXPECT_EQ(params, expected);
  EXPECT_LT(part.parameter_count(), whole.parameter_count());
}

TEST(TensorParallelStage, RejectsADegreeThatDoesNotDivideTheHeads) {
  auto backend = kernels::make_cpu_backend();
  ThreadGroup group(3);
  ThreadGroup::Member member(group, 0);
  StageSpec spec = StageSpec::whole(kSmall);
  spec.tensor_parallel = 3;
  EXPECT_THROW(Stage(kSmall, spec, *backend, 1, 1, &member), InputError);
  spec.tensor_parallel = 2;  // no group given
  EXPECT_THROW(Stage(kSmall, spec, *backend, 1, 1, nullptr), InputError);
}

}  // namespace
}  // namespace geotrain::model
