// The GPT model as pipeline stages. A stage owns layers [first_layer,
// last_layer) plus the token/position embedding (first stage) or the final
// layernorm and the LM head tied to the token embedding (last stage), and
// runs forward and backward on one micro-batch: the interface the pipeline
// runtime calls. A single-rank run is one stage that is both first and last.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/common/model_shape.hpp"
#include "geotrain/model/tensor_parallel.hpp"

namespace geotrain::model {

struct StageSpec {
  int first_layer = 0;
  int last_layer = 0;  // exclusive
  bool has_embedding = true;
  bool has_head = true;
  // Tensor parallelism (tensor_parallel.hpp): this rank's part of every
  // layer and of the vocabulary. 1: the whole stage.
  int tensor_parallel = 1;
  int tensor_rank = 0;
  static StageSpec whole(const ModelShape& config) { return {0, config.layers, true, true}; }
};

// One named parameter tensor inside a stage's contiguous parameter buffer.
// Names and whole shapes are global (independent of the stage layout), e.g.
// "h.3.attn.qkv.weight" [3C, C], so checkpoints and initial values do not
// depend on how the model is cut. Under tensor parallelism the buffer holds
// `slice` of the whole tensor (`count` floats, shape `local_shape`).
struct ParameterView {
  std::string name;
  std::vector<int> shape;  // the whole tensor's
  std::size_t offset = 0;  // in floats, into params() / grads()
  std::size_t count = 0;   // held here
  bool decays = false;     // weight decay applies to matrices, not to biases / norms
  TensorSlice slice{};     // not split: the whole tensor (count = product of shape)
  std::size_t whole_count() const;
  std::vector<int> local_shape() const;
  // This rank's weight in a sum over its unit of t ranks that counts each
  // tensor once: 1 for a slice, 1/t for a replicated tensor (every rank
  // holds it).
  double unit_share(int tensor_parallel) const { return slice.split() ? 1.0 : 1.0 / tensor_parallel; }
};

// The parameters a stage holds, in buffer order: a pure function of the
// model and the layer range (checkpoints are checked against it before any
// stage is built).
std::vector<ParameterView> parameter_layout(const ModelShape& config, const StageSpec& spec);

// Called by Stage::backward as ranges [begin, end) of the gradient buffer
// (float offsets) reach their final value for this backward: the head's
// LayerNorm, then each layer from the last, then the embeddings (at the
// buffer's start; on a last stage the tied wte, which is complete early but
// reported last so that the ranges come in one descending, gapless run).
using GradientReady = std::function<void(std::size_t begin, std::size_t end)>;

class Stage {
 public:
  // `slots`: activation sets kept for backward (GPipe: the micro-batch
  // count; 1F1B: the number of stages; single rank: 1). B sequences of T
  // tokens per micro-batch.
  // spec.tensor_parallel > 1: `tensor_group` (size and rank as in spec)
  // sums the partial results; it must outlive the stage.
  // `storage` bf16: each layer's activations are kept for the backward in
  // bf16 (half the bytes); the forward computes in fp32 as it does with fp32
  // storage (same loss, same outputs), the backward reads the rounded values.
  Stage(const ModelShape& config, const StageSpec& spec, kernels::Backend& backend, int micro_batch,
        int slots, TensorGroup* tensor_group = nullptr, ActivationStorage storage = ActivationStorage::fp32);
  ~Stage();
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  const ModelShape& config() const { return config_; }
  const StageSpec& spec() const { return spec_; }
  const std::vector<ParameterView>& parameters() const { return views_; }
  std::size_t parameter_count() const { return parameter_count_; }
  float* params() { return params_; }
  float* grads() { return grads_; }
  const ParameterView* find(const std::string& name) const;
  // The last stage's LM head matrix (wte when tied); null elsewhere.
  const ParameterView* lm_head() const { return find(config_.tied_head ? "wte" : "lm_head.weight"); }

  // GPT-2 initialisation, each tensor from its own stream seeded by (seed,
  // name): identical values whatever the stage layout.
  void initialize(std::uint64_t seed);
  void zero_grads();
  // A flushless pipeline (PipeDream-2BW) keeps two versions of the weights
  // and two gradient buffers: these exchange the stage's buffer with `other`
  // (parameter_count() floats from the same backend; the stage frees
  // whichever it holds at the end), so that what runs next reads or
  // accumulates into the other one.
  void swap_parameters(float*& other);
  void swap_gradients(float*& other);

  // Forward on micro-batch `slot`. First stage: `tokens` [B*T] (host), else
  // `input` [B,T,C] (device). Last stage: `targets` [B*T] (host), and the
  // mean loss of this micro-batch is returned; else 0. Last stage without
  // targets: the layers only (output(slot) then holds the last layer's
  // output): sampling needs one position's logits, not all of them.
  double forward(int slot, const int* tokens, const float* input, const int* targets);
  // Activations to send to the next stage after forward(slot) (last stage: see forward).
  const float* output(int slot) const;
  // Backward on micro-batch `slot`. Last stage: `loss_scale` multiplies the
  // per-token loss gradient (1 / tokens in the whole step, so gradients of
  // all micro-batches and replicas sum to the gradient of the mean loss);
  // else `doutput` [B,T,C] (device) is the gradient from the next stage.
  // Parameter gradients accumulate.
  // `ready` (may be null): told as each gradient range is done (see above).
  void backward(int slot, const float* doutput, float loss_scale, const GradientReady* ready = nullptr);
  // Gradient with respect to the stage's input after backward (not first stage).
  const float* dinput() const { return dresidual_; }

  int micro_batch() const { return B_; }
  TensorGroup* tensor_group() const { return tensor_group_; }
  // This rank's rows of the vocabulary (the whole of it without tensor parallelism).
  VocabularyRange vocabulary() const { return vocabulary_; }
  ActivationStorage activation_storage() const { return storage_; }

 private:
  // Pointers to one layer's tensors inside params_ (or, the same layout,
  // grads_), resolved once from the parameter layout so that forward and
  // backward never look a tensor up by name.
  struct LayerWeights {
    float *ln1_weight, *ln1_bias, *qkv_weight, *qkv_bias, *attn_proj_weight, *attn_proj_bias;
    float *ln2_weight, *ln2_bias, *fc_weight, *fc_bias, *mlp_proj_weight, *mlp_proj_bias;
  };
  // The tensors outside the layers; null where the stage does not hold them.
  struct EmbeddingHeadWeights {
    float *wte = nullptr, *wpe = nullptr, *lnf_weight = nullptr, *lnf_bias = nullptr;
    float* lm_head = nullptr;  // the head's V x H matrix: wte when tied
  };
  struct LayerActivations;
  struct SlotActivations;
  // The constructor's parts. split_across: this rank's share of the heads,
  // the layers' width and the vocabulary under tensor parallelism (checked
  // against its group). Then the buffers: the parameters and gradients with
  // the pointers into them, the activations kept for the backward (the
  // working buffers and one set per slot) and the backward's scratch.
  void split_across(TensorGroup* tensor_group);
  void allocate_parameters();
  void allocate_activations(int slots);
  SlotActivations* allocate_slot(std::size_t stored_per_layer, bool stores_input);
  void allocate_backward_scratch();
  float* tensor_in(float* buffer, const std::string& name) const;
  LayerWeights layer_weights_in(float* buffer, int layer) const;
  EmbeddingHeadWeights embedding_head_weights_in(float* buffer) const;
  // The layernorm right after a layer's output (the next layer's ln1, or the
  // head's lnf): the layer's last residual add computes it in the same pass.
  struct FollowingNorm {
    const float *weight = nullptr, *bias = nullptr;
    float *out = nullptr, *mean = nullptr, *rstd = nullptr;
  };
  // ln1_done: a.ln1 (and its statistics) were computed by the previous layer.
  void layer_forward(const LayerWeights& w, const float* input, const LayerActivations& a, bool ln1_done,
                     const FollowingNorm* following);
  void layer_backward(const LayerWeights& w, const LayerWeights& g, const float* input, const LayerActivations& a);
  // Layer i's activations where its forward and backward read and write them:
  // the slot's own (fp32 storage), or the shared working buffers with the
  // slot's statistics (bf16 storage; store_layer / load_layer move them).
  LayerActivations working_layer(const SlotActivations& slot, int i) const;
  void store_layer(SlotActivations& slot, int i, const LayerActivations& a);
  void load_layer(const SlotActivations& slot, int i, const LayerActivations& a);
  const float* layer_input(const SlotActivations& slot, int i);
  const float* last_output(const SlotActivations& slot) const;
  bool stores_bf16() const { return storage_ == ActivationStorage::bf16; }
  double split_loss(SlotActivations& slot);

  ModelShape config_;
  StageSpec spec_;
  kernels::Backend& backend_;
  int B_, T_, C_, V_, NH_;
  // This rank's share under tensor parallelism (whole: Ct_ = C_, NHt_ = NH_, vocabulary [0, V_)).
  int Ct_, NHt_;
  VocabularyRange vocabulary_{};
  TensorGroup* tensor_group_ = nullptr;
  bool split() const { return tensor_group_ != nullptr; }
  bool adds_replicated_terms() const { return !split() || tensor_group_->rank() == 0; }
  void sum_partials(float* data, std::size_t count) {
    if (split()) tensor_group_->sum(data, count);
  }
  std::vector<ParameterView> views_;
  std::size_t parameter_count_ = 0;
  std::vector<std::size_t> layer_begin_;  // offset of each layer's first tensor, then the end of the last
  float* params_ = nullptr;
  float* grads_ = nullptr;
  std::vector<LayerWeights> layer_params_, layer_grads_;  // index: layer - first_layer
  EmbeddingHeadWeights embedding_head_params_, embedding_head_grads_;
  std::vector<SlotActivations*> slots_;
  ActivationStorage storage_ = ActivationStorage::fp32;
  // bf16 storage: what each layer's stored block holds, in order (values each).
  std::vector<std::pair<float* LayerActivations::*, std::size_t>> stored_tensors_;
  std::size_t stored_output_offset_ = 0;  // where a stored block holds the layer's output
  // bf16 storage: one layer's fp32 activations while it runs; ln1 and out
  // alternate between two buffers, as one layer reads its predecessor's
  // while it writes its own.
  float *work_qkv_ = nullptr, *work_attention_out_ = nullptr, *work_residual2_ = nullptr, *work_ln2_ = nullptr;
  float *work_fc_ = nullptr, *work_gelu_ = nullptr;
  float* work_ln1_[2] = {nullptr, nullptr};
  float* work_out_[2] = {nullptr, nullptr};
  // backward scratch, shared by all slots
  float* dresidual_ = nullptr;
  float* dln_ = nullptr;
  float* dqkv_ = nullptr;
  float* attention_scratch_ = nullptr;  // B*NH*T
  float* dattention_out_ = nullptr;
  float* dfc_ = nullptr;
  float* dgelu_ = nullptr;
  float* dlogits_ = nullptr;
};

// Sum of squares of a stage's gradient for the global norm, with `skip` (may
// be null) left out; under tensor parallelism summed over the group with each
// replicated tensor counted once.
double gradient_squares(Stage& stage, kernels::Backend& backend, const float* grads, const ParameterView* skip);

}  // namespace geotrain::model
