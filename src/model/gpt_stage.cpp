// Forward and backward of one pipeline stage of a pre-LayerNorm GPT.
// Per layer:  ln1 = LN(x); qkv = ln1 Wqkv^T + b; y = attn(qkv);
//             r2 = x + y Wo^T + b; ln2 = LN(r2); h = gelu(ln2 Wfc^T + b);
//             out = r2 + h Wp^T + b.
// Every residual add is fused with the layernorm after it (ln2; the next
// layer's ln1 or the head's lnf) and the fc bias with its GELU.
// Backward runs the same steps in reverse with one residual-gradient buffer
// updated in place: the layernorm backward calls accumulate into it (the
// residual's backward, already fused), and dgelu is computed with fc's bias
// gradient in one pass.
// bf16 activation storage: each layer runs in shared fp32 working buffers and
// its activations are then stored in bf16 per slot; the backward widens them
// back into the working buffers, one layer at a time. The backward reads
// every layer's input rounded too - the stage's input included - so that
// where the stages are cut does not change the result.
#include <cmath>
#include <stdexcept>
#include <utility>

#include "geotrain/common/errors.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/model/init.hpp"

namespace geotrain::model {

struct Stage::LayerActivations {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *attention_lse, *attention_out, *residual2;
  float *ln2, *ln2_mean, *ln2_rstd, *fc, *gelu, *out;
};

struct Stage::SlotActivations {
  float* embedded = nullptr;  // first stage: embedding output (input of layer 0)
  float* input = nullptr;     // other stages: copy of the received activations
  // fp32 storage: every tensor. bf16: the layernorm and attention statistics
  // only; the rest is in `stored`, and the last layer's output in `output`.
  std::vector<LayerActivations> layers;
  // bf16: per layer, stored_tensors_ in order (a last layer's output only
  // where the head reads it back).
  std::vector<std::uint16_t*> stored;
  std::uint16_t* stored_input = nullptr;  // bf16: the stage's input (embedded or received), where read back
  float* output = nullptr;                // bf16: the last layer's output in fp32 (sent on, or sampled)
  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr, *logits = nullptr, *losses = nullptr;
  float *row_max = nullptr, *statistics = nullptr;  // tensor parallelism: the vocabulary-parallel loss
  int* tokens = nullptr;
  int* targets = nullptr;
};

namespace {
std::string layer_name(int layer, const char* tensor) { return "h." + std::to_string(layer) + "." + tensor; }

std::size_t product(const std::vector<int>& shape) {
  std::size_t n = 1;
  for (int d : shape) n *= static_cast<std::size_t>(d);
  return n;
}
}  // namespace

std::size_t ParameterView::whole_count() const { return product(shape); }

std::vector<int> ParameterView::local_shape() const {
  std::vector<int> local = shape;
  if (slice.split()) local[static_cast<std::size_t>(slice.dim)] = slice.blocks * slice.extent;
  return local;
}

std::vector<ParameterView> parameter_layout(const ModelShape& config, const StageSpec& spec) {
  const int C = config.hidden, V = config.vocabulary, T = config.sequence_length;
  const int t = spec.tensor_parallel, r = spec.tensor_rank;
  if (t < 1 || r < 0 || r >= t) throw InputError("parameter_layout: tensor rank outside the group");
  std::vector<ParameterView> views;
  std::size_t offset = 0;
  // `slice`: this rank's part when t > 1 (default: replicated).
  auto add = [&](const std::string& name, std::vector<int> shape, bool decays, TensorSlice slice = {}) {
    ParameterView view{name, std::move(shape), offset, 0, decays, t > 1 ? slice : TensorSlice{}};
    view.count = product(view.local_shape());
    views.push_back(std::move(view));
    offset += views.back().count;
  };
  const VocabularyRange vocabulary = vocabulary_range(V, t, r);
  const TensorSlice vocabulary_rows{0, 1, vocabulary.begin, vocabulary.rows};
  // Column-parallel matrices split their output rows (q, k and v each by
  // heads), row-parallel ones their input columns.
  const TensorSlice heads_rows{0, 3, r * C / t, C / t}, heads_columns{1, 1, r * C / t, C / t};
  const TensorSlice mlp_rows{0, 1, r * 4 * C / t, 4 * C / t}, mlp_columns{1, 1, r * 4 * C / t, 4 * C / t};
  // A tied LM head is wte: a stage that has either holds wte.
  if (spec.has_embedding || (spec.has_head && config.tied_head)) add("wte", {V, C}, true, vocabulary_rows);
  if (spec.has_embedding) add("wpe", {T, C}, true);
  for (int l = spec.first_layer; l < spec.last_layer; ++l) {
    add(layer_name(l, "ln1.weight"), {C}, false);
    add(layer_name(l, "ln1.bias"), {C}, false);
    add(layer_name(l, "attn.qkv.weight"), {3 * C, C}, true, heads_rows);
    add(layer_name(l, "attn.qkv.bias"), {3 * C}, false, heads_rows);
    add(layer_name(l, "attn.proj.weight"), {C, C}, true, heads_columns);
    add(layer_name(l, "attn.proj.bias"), {C}, false);
    add(layer_name(l, "ln2.weight"), {C}, false);
    add(layer_name(l, "ln2.bias"), {C}, false);
    add(layer_name(l, "mlp.fc.weight"), {4 * C, C}, true, mlp_rows);
    add(layer_name(l, "mlp.fc.bias"), {4 * C}, false, mlp_rows);
    add(layer_name(l, "mlp.proj.weight"), {C, 4 * C}, true, mlp_columns);
    add(layer_name(l, "mlp.proj.bias"), {C}, false);
  }
  if (spec.has_head) {
    add("lnf.weight", {C}, false);
    add("lnf.bias", {C}, false);
    if (!config.tied_head) add("lm_head.weight", {V, C}, true, vocabulary_rows);
  }
  return views;
}

Stage::Stage(const ModelShape& config, const StageSpec& spec, kernels::Backend& backend, int micro_batch,
             int slots, TensorGroup* tensor_group, ActivationStorage storage)
    : config_(config), spec_(spec), backend_(backend), B_(micro_batch), T_(config.sequence_length),
      C_(config.hidden), V_(config.vocabulary), NH_(config.heads), Ct_(config.hidden), NHt_(config.heads),
      vocabulary_{0, config.vocabulary}, storage_(storage) {
  if (config.hidden % config.heads != 0) throw InputError("Stage: hidden must be divisible by heads");
  if (spec.tensor_parallel > 1) split_across(tensor_group);
  if (spec.first_layer < 0 || spec.last_layer > config.layers || spec.first_layer > spec.last_layer) {
    throw InputError("Stage: layer range outside the model");
  }
  allocate_parameters();
  allocate_activations(slots);
  allocate_backward_scratch();
}

void Stage::split_across(TensorGroup* tensor_group) {
  const int t = spec_.tensor_parallel;
  if (tensor_group == nullptr || tensor_group->size() != t || tensor_group->rank() != spec_.tensor_rank) {
    throw InputError("Stage: tensor parallelism needs its group (size and rank as in the spec)");
  }
  if (config_.heads % t != 0 || config_.vocabulary < t) {
    throw InputError("Stage: tensor parallelism " + std::to_string(t) + " must divide the heads (" +
                     std::to_string(config_.heads) + ") and leave every rank some of the vocabulary");
  }
  tensor_group_ = tensor_group;
  Ct_ = C_ / t;
  NHt_ = NH_ / t;
  vocabulary_ = vocabulary_range(V_, t, spec_.tensor_rank);
}

void Stage::allocate_parameters() {
  views_ = parameter_layout(config_, spec_);
  for (const ParameterView& view : views_) parameter_count_ += view.count;
  params_ = backend_.alloc(parameter_count_);
  grads_ = backend_.alloc(parameter_count_);
  for (int l = spec_.first_layer; l < spec_.last_layer; ++l) {
    layer_params_.push_back(layer_weights_in(params_, l));
    layer_grads_.push_back(layer_weights_in(grads_, l));
    layer_begin_.push_back(find(layer_name(l, "ln1.weight"))->offset);
  }
  // Past the last layer: the head's LayerNorm, or the buffer's end.
  const ParameterView* lnf = find("lnf.weight");
  const std::size_t layers_end = lnf ? lnf->offset : parameter_count_;
  if (layer_begin_.empty()) layer_begin_.push_back(layers_end);  // no layers: the ranges still meet
  layer_begin_.push_back(layers_end);
  embedding_head_params_ = embedding_head_weights_in(params_);
  embedding_head_grads_ = embedding_head_weights_in(grads_);
}

void Stage::allocate_activations(int slots) {
  const std::size_t N = static_cast<std::size_t>(B_) * T_, C = C_, Ct = Ct_;
  auto A = [&](std::size_t count) { return backend_.alloc(count); };
  const int layers = spec_.last_layer - spec_.first_layer;
  stored_tensors_ = {{&LayerActivations::ln1, N * C},       {&LayerActivations::qkv, N * 3 * Ct},
                     {&LayerActivations::attention_out, N * Ct}, {&LayerActivations::residual2, N * C},
                     {&LayerActivations::ln2, N * C},       {&LayerActivations::fc, N * 4 * Ct},
                     {&LayerActivations::gelu, N * 4 * Ct}, {&LayerActivations::out, N * C}};
  std::size_t stored_per_layer = 0;
  for (const auto& tensor : stored_tensors_) stored_per_layer += tensor.second;
  stored_output_offset_ = stored_per_layer - N * C;  // out: the last of stored_tensors_
  // bf16: what the backward reads back is stored - every layer's tensors, and
  // the inputs of the layers and of the head: so the stage's input where it
  // has layers or the head, and the last layer's output only for the head.
  const bool stores_input = stores_bf16() && (layers > 0 || spec_.has_head);
  if (stores_bf16() && layers > 0) {
    work_qkv_ = A(N * 3 * Ct), work_attention_out_ = A(N * Ct), work_residual2_ = A(N * C), work_ln2_ = A(N * C);
    work_fc_ = A(N * 4 * Ct), work_gelu_ = A(N * 4 * Ct);
    for (float*& buffer : work_ln1_) buffer = A(N * C);
  }
  if (stores_input) {
    for (float*& buffer : work_out_) buffer = A(N * C);
  }
  for (int s = 0; s < slots; ++s) slots_.push_back(allocate_slot(stored_per_layer, stores_input));
}

Stage::SlotActivations* Stage::allocate_slot(std::size_t stored_per_layer, bool stores_input) {
  const std::size_t N = static_cast<std::size_t>(B_) * T_, C = C_, Vt = vocabulary_.rows;
  auto A = [&](std::size_t count) { return backend_.alloc(count); };
  const int layers = spec_.last_layer - spec_.first_layer;
  auto* slot = new SlotActivations;
  if (spec_.has_embedding) {
    slot->embedded = A(N * C);
    slot->tokens = backend_.alloc_tokens(N);
  } else {
    slot->input = A(N * C);
  }
  for (int i = 0; i < layers; ++i) {
    LayerActivations a{};
    a.ln1_mean = A(N), a.ln1_rstd = A(N), a.ln2_mean = A(N), a.ln2_rstd = A(N);
    a.attention_lse = A(static_cast<std::size_t>(B_) * NHt_ * T_);
    if (stores_bf16()) {
      const bool keeps_output = i + 1 < layers || spec_.has_head;
      slot->stored.push_back(backend_.alloc_bf16(keeps_output ? stored_per_layer : stored_output_offset_));
    } else {
      for (const auto& [tensor, values] : stored_tensors_) a.*tensor = A(values);
    }
    slot->layers.push_back(a);
  }
  if (stores_input) slot->stored_input = backend_.alloc_bf16(N * C);
  if (stores_bf16() && layers > 0) slot->output = A(N * C);
  if (spec_.has_head) {
    slot->lnf = A(N * C), slot->lnf_mean = A(N), slot->lnf_rstd = A(N);
    slot->logits = A(N * Vt), slot->losses = A(N);
    if (split()) slot->row_max = A(N), slot->statistics = A(2 * N);
    slot->targets = backend_.alloc_tokens(N);
  }
  return slot;
}

void Stage::allocate_backward_scratch() {
  const std::size_t N = static_cast<std::size_t>(B_) * T_, C = C_, Ct = Ct_, Vt = vocabulary_.rows;
  auto A = [&](std::size_t count) { return backend_.alloc(count); };
  dresidual_ = A(N * C);
  dln_ = A(N * C);
  dqkv_ = A(N * 3 * Ct);
  attention_scratch_ = A(static_cast<std::size_t>(B_) * NHt_ * T_);
  dattention_out_ = A(N * Ct);
  dfc_ = A(N * 4 * Ct);
  dgelu_ = A(N * 4 * Ct);
  if (spec_.has_head) dlogits_ = A(N * Vt);
}

Stage::~Stage() {
  auto R = [&](void* p) {
    if (p) backend_.release(p);
  };
  for (SlotActivations* slot : slots_) {
    R(slot->embedded), R(slot->input), R(slot->tokens), R(slot->targets), R(slot->output);
    for (std::uint16_t* p : slot->stored) R(p);
    R(slot->stored_input);
    for (auto& a : slot->layers) {
      for (float* p : {a.ln1, a.ln1_mean, a.ln1_rstd, a.qkv, a.attention_lse, a.attention_out, a.residual2, a.ln2,
                       a.ln2_mean, a.ln2_rstd, a.fc, a.gelu, a.out}) {
        R(p);
      }
    }
    for (float* p : {slot->lnf, slot->lnf_mean, slot->lnf_rstd, slot->logits, slot->losses, slot->row_max,
                     slot->statistics}) {
      R(p);
    }
    delete slot;
  }
  for (float* p : {params_, grads_, dresidual_, dln_, dqkv_, attention_scratch_, dattention_out_, dfc_, dgelu_, dlogits_}) R(p);
  for (float* p : {work_qkv_, work_attention_out_, work_residual2_, work_ln2_, work_fc_, work_gelu_, work_ln1_[0],
                   work_ln1_[1], work_out_[0], work_out_[1]}) {
    R(p);
  }
}

const ParameterView* Stage::find(const std::string& name) const {
  for (const auto& v : views_) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

float* Stage::tensor_in(float* buffer, const std::string& name) const {
  const ParameterView* view = find(name);
  if (!view) throw std::logic_error("Stage: no parameter '" + name + "' in the layout");
  return buffer + view->offset;
}

Stage::LayerWeights Stage::layer_weights_in(float* buffer, int l) const {
  auto at = [&](const char* tensor) { return tensor_in(buffer, layer_name(l, tensor)); };
  return {at("ln1.weight"),       at("ln1.bias"),       at("attn.qkv.weight"), at("attn.qkv.bias"),
          at("attn.proj.weight"), at("attn.proj.bias"), at("ln2.weight"),      at("ln2.bias"),
          at("mlp.fc.weight"),    at("mlp.fc.bias"),    at("mlp.proj.weight"), at("mlp.proj.bias")};
}

Stage::EmbeddingHeadWeights Stage::embedding_head_weights_in(float* buffer) const {
  EmbeddingHeadWeights w;
  if (find("wte") != nullptr) w.wte = tensor_in(buffer, "wte");
  if (spec_.has_embedding) w.wpe = tensor_in(buffer, "wpe");
  if (spec_.has_head) {
    w.lnf_weight = tensor_in(buffer, "lnf.weight");
    w.lnf_bias = tensor_in(buffer, "lnf.bias");
    w.lm_head = config_.tied_head ? w.wte : tensor_in(buffer, "lm_head.weight");
  }
  return w;
}

void Stage::initialize(std::uint64_t seed) {
  std::vector<float> host(parameter_count_), whole;
  for (const auto& v : views_) {
    if (!v.slice.split()) {
      fill_initial_values(v, config_, seed, host.data() + v.offset);
      continue;
    }
    // A rank's part is the same part of the whole tensor's values.
    ParameterView whole_view = v;
    whole_view.count = v.whole_count();
    whole.resize(whole_view.count);
    fill_initial_values(whole_view, config_, seed, whole.data());
    copy_slice_out(v.slice, v.shape, whole.data(), host.data() + v.offset);
  }
  backend_.upload(params_, host.data(), parameter_count_);
}

void Stage::zero_grads() { backend_.fill_zero(grads_, parameter_count_); }

void Stage::swap_parameters(float*& other) {
  std::swap(params_, other);
  for (int l = spec_.first_layer; l < spec_.last_layer; ++l) {
    layer_params_[static_cast<std::size_t>(l - spec_.first_layer)] = layer_weights_in(params_, l);
  }
  embedding_head_params_ = embedding_head_weights_in(params_);
}

void Stage::swap_gradients(float*& other) {
  std::swap(grads_, other);
  for (int l = spec_.first_layer; l < spec_.last_layer; ++l) {
    layer_grads_[static_cast<std::size_t>(l - spec_.first_layer)] = layer_weights_in(grads_, l);
  }
  embedding_head_grads_ = embedding_head_weights_in(grads_);
}

void Stage::layer_forward(const LayerWeights& w, const float* x, const LayerActivations& a, bool ln1_done,
                          const FollowingNorm* following) {
  const int N = B_ * T_, C = C_, Ct = Ct_;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  auto& k = backend_;
  if (!ln1_done) k.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_weight, w.ln1_bias, N, C);
  k.matmul_forward(a.qkv, a.ln1, w.qkv_weight, w.qkv_bias, N, C, 3 * Ct);
  k.attention_forward(a.attention_out, a.attention_lse, a.qkv, B_, T_, Ct, NHt_);
  // residual2 = x + proj(attention): project into residual2, then add x in
  // place in the pass that normalises it. Split: each rank projects its
  // heads, the group sums the parts (the replicated bias added once).
  k.matmul_forward(a.residual2, a.attention_out, w.attn_proj_weight,
                   adds_replicated_terms() ? w.attn_proj_bias : nullptr, N, Ct, C);
  sum_partials(a.residual2, NC);
  k.residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, x, w.ln2_weight, w.ln2_bias,
                               N, C);
  k.matmul_gelu_forward(a.gelu, a.fc, a.ln2, w.fc_weight, w.fc_bias, N, C, 4 * Ct);
  k.matmul_forward(a.out, a.gelu, w.mlp_proj_weight, adds_replicated_terms() ? w.mlp_proj_bias : nullptr, N, 4 * Ct,
                   C);
  sum_partials(a.out, NC);
  if (following != nullptr) {
    k.residual_layernorm_forward(a.out, following->out, following->mean, following->rstd, a.out, a.residual2,
                                 following->weight, following->bias, N, C);
  } else {
    k.accumulate(a.out, a.residual2, NC);
  }
}

// On entry dresidual_ holds d(out); on exit d(x).
void Stage::layer_backward(const LayerWeights& w, const LayerWeights& g, const float* x, const LayerActivations& a) {
  const int N = B_ * T_, C = C_, Ct = Ct_;
  const std::size_t NC = static_cast<std::size_t>(N) * C, NCt = static_cast<std::size_t>(N) * Ct;
  auto& k = backend_;
  // MLP branch: out = r2 + proj(gelu(fc(ln2(r2)))). Split: d(ln2) is the
  // sum of every rank's part (fc is column-parallel); the replicated biases'
  // gradients come out the same on every rank.
  k.fill_zero(dgelu_, 4 * NCt);
  k.matmul_backward(dgelu_, g.mlp_proj_weight, g.mlp_proj_bias, dresidual_, a.gelu, w.mlp_proj_weight, N, 4 * Ct, C);
  k.fill_zero(dln_, NC);
  k.matmul_gelu_backward(dln_, g.fc_weight, g.fc_bias, dfc_, dgelu_, a.fc, a.ln2, w.fc_weight, N, C, 4 * Ct);
  sum_partials(dln_, NC);
  k.layernorm_backward(dresidual_, g.ln2_weight, g.ln2_bias, dln_, a.residual2, w.ln2_weight, a.ln2_mean, a.ln2_rstd,
                       N, C);
  // Attention branch: r2 = x + proj(attn(qkv(ln1(x)))).
  k.fill_zero(dattention_out_, NCt);
  k.matmul_backward(dattention_out_, g.attn_proj_weight, g.attn_proj_bias, dresidual_, a.attention_out,
                    w.attn_proj_weight, N, Ct, C);
  k.fill_zero(dqkv_, 3 * NCt);
  k.attention_backward(dqkv_, attention_scratch_, dattention_out_, a.qkv, a.attention_out, a.attention_lse, B_, T_, Ct,
                       NHt_);
  k.fill_zero(dln_, NC);
  k.matmul_backward(dln_, g.qkv_weight, g.qkv_bias, dqkv_, a.ln1, w.qkv_weight, N, C, 3 * Ct);
  sum_partials(dln_, NC);
  k.layernorm_backward(dresidual_, g.ln1_weight, g.ln1_bias, dln_, x, w.ln1_weight, a.ln1_mean, a.ln1_rstd, N, C);
}

Stage::LayerActivations Stage::working_layer(const SlotActivations& slot, int i) const {
  LayerActivations a = slot.layers[static_cast<std::size_t>(i)];
  if (!stores_bf16()) return a;
  a.ln1 = work_ln1_[i % 2];
  a.qkv = work_qkv_, a.attention_out = work_attention_out_, a.residual2 = work_residual2_, a.ln2 = work_ln2_;
  a.fc = work_fc_, a.gelu = work_gelu_;
  a.out = i + 1 == static_cast<int>(slot.layers.size()) ? slot.output : work_out_[i % 2];
  return a;
}

void Stage::store_layer(SlotActivations& slot, int i, const LayerActivations& a) {
  const bool keeps_output = i + 1 < static_cast<int>(slot.layers.size()) || spec_.has_head;
  std::uint16_t* to = slot.stored[static_cast<std::size_t>(i)];
  for (const auto& [tensor, values] : stored_tensors_) {
    if (tensor == &LayerActivations::out && !keeps_output) break;  // out is the last
    backend_.to_bf16(to, a.*tensor, values);
    to += values;
  }
}

// Everything but the layer's output, which its own backward does not read.
void Stage::load_layer(const SlotActivations& slot, int i, const LayerActivations& a) {
  const std::uint16_t* from = slot.stored[static_cast<std::size_t>(i)];
  for (const auto& [tensor, values] : stored_tensors_) {
    if (tensor != &LayerActivations::out) backend_.from_bf16(a.*tensor, from, values);
    from += values;
  }
}

// Layer i's input as its backward reads it (i = layers: the head's input).
// bf16: the stored output of layer i-1, or the stored stage input, widened
// into the output buffer that layer i's own backward does not use.
const float* Stage::layer_input(const SlotActivations& slot, int i) {
  if (!stores_bf16()) {
    if (i == 0) return spec_.has_embedding ? slot.embedded : slot.input;
    return slot.layers[static_cast<std::size_t>(i - 1)].out;
  }
  const std::size_t NC = static_cast<std::size_t>(B_) * T_ * C_;
  const std::uint16_t* stored = slot.stored_input;
  if (i > 0) stored = slot.stored[static_cast<std::size_t>(i - 1)] + stored_output_offset_;
  float* x = work_out_[(i + 1) % 2];
  backend_.from_bf16(x, stored, NC);
  return x;
}

const float* Stage::last_output(const SlotActivations& slot) const {
  if (slot.layers.empty()) return spec_.has_embedding ? slot.embedded : slot.input;
  return stores_bf16() ? slot.output : slot.layers.back().out;
}

double Stage::forward(int slot_index, const int* tokens, const float* input, const int* targets) {
  SlotActivations& slot = *slots_.at(slot_index);
  const int N = B_ * T_, C = C_;
  const float* x;
  if (spec_.has_embedding) {
    backend_.upload_tokens(slot.tokens, tokens, N);
    const EmbeddingHeadWeights& e = embedding_head_params_;
    if (split()) {  // vocabulary-parallel: each rank adds its rows, wpe once
      backend_.embedding_shard_forward(slot.embedded, slot.tokens, e.wte, adds_replicated_terms() ? e.wpe : nullptr,
                                       B_, T_, C, vocabulary_.begin, vocabulary_.rows);
      sum_partials(slot.embedded, static_cast<std::size_t>(N) * C);
    } else {
      backend_.embedding_forward(slot.embedded, slot.tokens, e.wte, e.wpe, B_, T_, C);
    }
    x = slot.embedded;
  } else {
    // Keep our own copy: the sender may reuse its buffer.
    backend_.fill_zero(slot.input, static_cast<std::size_t>(N) * C);
    backend_.accumulate(slot.input, input, static_cast<std::size_t>(N) * C);
    x = slot.input;
  }
  if (slot.stored_input != nullptr) backend_.to_bf16(slot.stored_input, x, static_cast<std::size_t>(N) * C);
  const bool runs_head = spec_.has_head && targets != nullptr;
  const EmbeddingHeadWeights& w = embedding_head_params_;
  for (std::size_t i = 0; i < slot.layers.size(); ++i) {
    // Each layer's last residual add also normalises its sum for whoever reads
    // it next in this stage: the next layer's ln1, or the head's lnf.
    const int layer = static_cast<int>(i);
    FollowingNorm following;
    if (i + 1 < slot.layers.size()) {
      const LayerActivations next = working_layer(slot, layer + 1);
      following = {layer_params_[i + 1].ln1_weight, layer_params_[i + 1].ln1_bias, next.ln1, next.ln1_mean,
                   next.ln1_rstd};
    } else if (runs_head) {
      following = {w.lnf_weight, w.lnf_bias, slot.lnf, slot.lnf_mean, slot.lnf_rstd};
    }
    const LayerActivations a = working_layer(slot, layer);
    layer_forward(layer_params_[i], x, a, i > 0, following.out != nullptr ? &following : nullptr);
    if (stores_bf16()) store_layer(slot, layer, a);
    x = a.out;
  }
  if (!runs_head) return 0.0;
  if (slot.layers.empty()) {
    backend_.layernorm_forward(slot.lnf, slot.lnf_mean, slot.lnf_rstd, x, w.lnf_weight, w.lnf_bias, N, C);
  }
  backend_.matmul_forward(slot.logits, slot.lnf, w.lm_head, nullptr, N, C, vocabulary_.rows);
  backend_.upload_tokens(slot.targets, targets, N);
  if (split()) return split_loss(slot);
  backend_.crossentropy_forward(slot.losses, slot.logits, slot.targets, N, V_);
  std::vector<float> losses(N);
  backend_.download(losses.data(), slot.losses, N);
  double sum = 0;
  for (float x_ : losses) sum += x_;
  return sum / N;
}

// Vocabulary-parallel: the row maxima over the group, then the softmax
// denominators and target logits summed over it (backend.hpp).
double Stage::split_loss(SlotActivations& slot) {
  const int N = B_ * T_;
  backend_.crossentropy_shard_max(slot.row_max, slot.logits, N, vocabulary_.rows);
  tensor_group_->max(slot.row_max, static_cast<std::size_t>(N));
  backend_.crossentropy_shard_statistics(slot.statistics, slot.logits, slot.targets, slot.row_max, N,
                                         vocabulary_.rows, vocabulary_.begin);
  tensor_group_->sum(slot.statistics, 2 * static_cast<std::size_t>(N));
  std::vector<float> statistics(2 * static_cast<std::size_t>(N));
  backend_.download(statistics.data(), slot.statistics, statistics.size());
  double sum = 0;
  for (int row = 0; row < N; ++row) {
    sum += std::log(static_cast<double>(statistics[2 * row])) - statistics[2 * row + 1];
  }
  return sum / N;
}

const float* Stage::output(int slot_index) const { return last_output(*slots_.at(slot_index)); }

void Stage::backward(int slot_index, const float* doutput, float loss_scale, const GradientReady* ready) {
  auto done = [&](std::size_t begin, std::size_t end) {
    if (ready != nullptr && end > begin) (*ready)(begin, end);
  };
  SlotActivations& slot = *slots_.at(slot_index);
  const int N = B_ * T_, C = C_;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const float* last_input = spec_.has_head ? layer_input(slot, static_cast<int>(slot.layers.size())) : nullptr;
  const EmbeddingHeadWeights &w = embedding_head_params_, &g = embedding_head_grads_;
  if (spec_.has_head) {
    if (split()) {
      backend_.crossentropy_shard_backward(dlogits_, slot.logits, slot.targets, slot.row_max, slot.statistics,
                                           loss_scale, N, vocabulary_.rows, vocabulary_.begin);
    } else {
      backend_.crossentropy_backward(dlogits_, slot.logits, slot.targets, loss_scale, N, V_);
    }
    backend_.fill_zero(dln_, NC);
    backend_.matmul_backward(dln_, g.lm_head, nullptr, dlogits_, slot.lnf, w.lm_head, N, C, vocabulary_.rows);
    sum_partials(dln_, NC);
    backend_.fill_zero(dresidual_, NC);
    backend_.layernorm_backward(dresidual_, g.lnf_weight, g.lnf_bias, dln_, last_input, w.lnf_weight, slot.lnf_mean,
                                slot.lnf_rstd, N, C);
    done(layer_begin_.back(), parameter_count_);
  } else {
    backend_.fill_zero(dresidual_, NC);
    backend_.accumulate(dresidual_, doutput, NC);
  }
  for (int i = static_cast<int>(slot.layers.size()) - 1; i >= 0; --i) {
    const LayerActivations a = working_layer(slot, i);
    if (stores_bf16()) load_layer(slot, i, a);
    layer_backward(layer_params_[i], layer_grads_[i], layer_input(slot, i), a);
    done(layer_begin_[i], layer_begin_[i + 1]);
  }
  if (spec_.has_embedding) {
    if (split()) {
      backend_.embedding_shard_backward(g.wte, g.wpe, dresidual_, slot.tokens, B_, T_, C, vocabulary_.begin,
                                        vocabulary_.rows);
    } else {
      backend_.embedding_backward(g.wte, g.wpe, dresidual_, slot.tokens, B_, T_, C);
    }
  }
  done(0, layer_begin_.front());
}

double gradient_squares(Stage& stage, kernels::Backend& backend, const float* grads, const ParameterView* skip) {
  TensorGroup* group = stage.tensor_group();
  if (group == nullptr) {
    if (skip == nullptr) return backend.sum_of_squares(grads, stage.parameter_count());
    return backend.sum_of_squares(grads, skip->offset) +
           backend.sum_of_squares(grads + skip->offset + skip->count,
                                  stage.parameter_count() - skip->offset - skip->count);
  }
  double squares = 0;
  for (const ParameterView& view : stage.parameters()) {
    if (&view == skip) continue;
    squares += backend.sum_of_squares(grads + view.offset, view.count) * view.unit_share(group->size());
  }
  group->sum_values(&squares, 1);
  return squares;
}

}  // namespace geotrain::model
