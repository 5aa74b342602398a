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
#include <cmath>
#include <stdexcept>

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
  std::vector<LayerActivations> layers;
  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr, *logits = nullptr, *losses = nullptr;
  int* tokens = nullptr;
  int* targets = nullptr;
};

namespace {
std::string layer_name(int layer, const char* tensor) { return "h." + std::to_string(layer) + "." + tensor; }
}  // namespace

std::vector<ParameterView> parameter_layout(const ModelShape& config, const StageSpec& spec) {
  const int C = config.hidden, V = config.vocabulary, T = config.sequence_length;
  std::vector<ParameterView> views;
  std::size_t offset = 0;
  auto add = [&](const std::string& name, std::vector<int> shape, bool decays) {
    std::size_t count = 1;
    for (int d : shape) count *= static_cast<std::size_t>(d);
    views.push_back({name, std::move(shape), offset, count, decays});
    offset += count;
  };
  // A tied LM head is wte: a stage that has either holds wte.
  if (spec.has_embedding || (spec.has_head && config.tied_head)) add("wte", {V, C}, true);
  if (spec.has_embedding) add("wpe", {T, C}, true);
  for (int l = spec.first_layer; l < spec.last_layer; ++l) {
    add(layer_name(l, "ln1.weight"), {C}, false);
    add(layer_name(l, "ln1.bias"), {C}, false);
    add(layer_name(l, "attn.qkv.weight"), {3 * C, C}, true);
    add(layer_name(l, "attn.qkv.bias"), {3 * C}, false);
    add(layer_name(l, "attn.proj.weight"), {C, C}, true);
    add(layer_name(l, "attn.proj.bias"), {C}, false);
    add(layer_name(l, "ln2.weight"), {C}, false);
    add(layer_name(l, "ln2.bias"), {C}, false);
    add(layer_name(l, "mlp.fc.weight"), {4 * C, C}, true);
    add(layer_name(l, "mlp.fc.bias"), {4 * C}, false);
    add(layer_name(l, "mlp.proj.weight"), {C, 4 * C}, true);
    add(layer_name(l, "mlp.proj.bias"), {C}, false);
  }
  if (spec.has_head) {
    add("lnf.weight", {C}, false);
    add("lnf.bias", {C}, false);
    if (!config.tied_head) add("lm_head.weight", {V, C}, true);
  }
  return views;
}

Stage::Stage(const ModelShape& config, const StageSpec& spec, kernels::Backend& backend, int micro_batch,
             int slots)
    : config_(config), spec_(spec), backend_(backend), B_(micro_batch), T_(config.sequence_length),
      C_(config.hidden), V_(config.vocabulary), NH_(config.heads) {
  if (config.hidden % config.heads != 0) throw std::invalid_argument("Stage: hidden must be divisible by heads");
  if (spec.first_layer < 0 || spec.last_layer > config.layers || spec.first_layer > spec.last_layer) {
    throw std::invalid_argument("Stage: layer range outside the model");
  }
  views_ = parameter_layout(config, spec);
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

  const std::size_t N = static_cast<std::size_t>(B_) * T_, C = C_;
  auto A = [&](std::size_t count) { return backend_.alloc(count); };
  for (int s = 0; s < slots; ++s) {
    auto* slot = new SlotActivations;
    if (spec_.has_embedding) {
      slot->embedded = A(N * C);
      slot->tokens = backend_.alloc_tokens(N);
    } else {
      slot->input = A(N * C);
    }
    for (int l = spec_.first_layer; l < spec_.last_layer; ++l) {
      LayerActivations a;
      a.ln1 = A(N * C), a.ln1_mean = A(N), a.ln1_rstd = A(N), a.qkv = A(N * 3 * C);
      a.attention_lse = A(static_cast<std::size_t>(B_) * NH_ * T_), a.attention_out = A(N * C);
      a.residual2 = A(N * C), a.ln2 = A(N * C), a.ln2_mean = A(N), a.ln2_rstd = A(N);
      a.fc = A(N * 4 * C), a.gelu = A(N * 4 * C), a.out = A(N * C);
      slot->layers.push_back(a);
    }
    if (spec_.has_head) {
      slot->lnf = A(N * C), slot->lnf_mean = A(N), slot->lnf_rstd = A(N);
      slot->logits = A(N * V_), slot->losses = A(N);
      slot->targets = backend_.alloc_tokens(N);
    }
    slots_.push_back(slot);
  }
  dresidual_ = A(N * C);
  dln_ = A(N * C);
  dqkv_ = A(N * 3 * C);
  attention_scratch_ = A(static_cast<std::size_t>(B_) * NH_ * T_);
  dattention_out_ = A(N * C);
  dfc_ = A(N * 4 * C);
  dgelu_ = A(N * 4 * C);
  if (spec_.has_head) dlogits_ = A(N * V_);
}

Stage::~Stage() {
  auto R = [&](void* p) {
    if (p) backend_.release(p);
  };
  for (SlotActivations* slot : slots_) {
    R(slot->embedded), R(slot->input), R(slot->tokens), R(slot->targets);
    for (auto& a : slot->layers) {
      for (float* p : {a.ln1, a.ln1_mean, a.ln1_rstd, a.qkv, a.attention_lse, a.attention_out, a.residual2, a.ln2,
                       a.ln2_mean, a.ln2_rstd, a.fc, a.gelu, a.out}) {
        R(p);
      }
    }
    for (float* p : {slot->lnf, slot->lnf_mean, slot->lnf_rstd, slot->logits, slot->losses}) R(p);
    delete slot;
  }
  for (float* p : {params_, grads_, dresidual_, dln_, dqkv_, attention_scratch_, dattention_out_, dfc_, dgelu_, dlogits_}) R(p);
}

std::size_t Stage::activation_floats_per_slot() const {
  const std::size_t N = static_cast<std::size_t>(B_) * T_, C = C_;
  // ln1, qkv(3), attention_out, residual2, ln2, fc(4), gelu(4), out = 16 NC;
  // four N-vectors of layernorm statistics; the attention's log-sum-exp per
  // (sequence, head, query), B*NH*T (the fused attention keeps no T x T matrix).
  const std::size_t per_layer = 16 * N * C + 4 * N + static_cast<std::size_t>(B_) * NH_ * T_;
  std::size_t total = N * C + per_layer * (spec_.last_layer - spec_.first_layer);
  if (spec_.has_head) total += N * C + 3 * N + N * V_;
  return total;
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
  std::vector<float> host(parameter_count_);
  for (const auto& v : views_) fill_initial_values(v, config_, seed, host.data() + v.offset);
  backend_.upload(params_, host.data(), parameter_count_);
}

void Stage::zero_grads() { backend_.fill_zero(grads_, parameter_count_); }

void Stage::layer_forward(const LayerWeights& w, const float* x, LayerActivations& a, bool ln1_done,
                          const FollowingNorm* following) {
  const int N = B_ * T_, C = C_;
  auto& k = backend_;
  if (!ln1_done) k.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_weight, w.ln1_bias, N, C);
  k.matmul_forward(a.qkv, a.ln1, w.qkv_weight, w.qkv_bias, N, C, 3 * C);
  k.attention_forward(a.attention_out, a.attention_lse, a.qkv, B_, T_, C, NH_);
  // residual2 = x + proj(attention): project into residual2, then add x in
  // place in the pass that normalises it.
  k.matmul_forward(a.residual2, a.attention_out, w.attn_proj_weight, w.attn_proj_bias, N, C, C);
  k.residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, x, w.ln2_weight, w.ln2_bias,
                               N, C);
  k.matmul_gelu_forward(a.gelu, a.fc, a.ln2, w.fc_weight, w.fc_bias, N, C, 4 * C);
  k.matmul_forward(a.out, a.gelu, w.mlp_proj_weight, w.mlp_proj_bias, N, 4 * C, C);
  if (following != nullptr) {
    k.residual_layernorm_forward(a.out, following->out, following->mean, following->rstd, a.out, a.residual2,
                                 following->weight, following->bias, N, C);
  } else {
    k.accumulate(a.out, a.residual2, static_cast<std::size_t>(N) * C);
  }
}

// On entry dresidual_ holds d(out); on exit d(x).
void Stage::layer_backward(const LayerWeights& w, const LayerWeights& g, const float* x, const LayerActivations& a) {
  const int N = B_ * T_, C = C_;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  auto& k = backend_;
  // MLP branch: out = r2 + proj(gelu(fc(ln2(r2)))).
  k.fill_zero(dgelu_, 4 * NC);
  k.matmul_backward(dgelu_, g.mlp_proj_weight, g.mlp_proj_bias, dresidual_, a.gelu, w.mlp_proj_weight, N, 4 * C, C);
  k.fill_zero(dln_, NC);
  k.matmul_gelu_backward(dln_, g.fc_weight, g.fc_bias, dfc_, dgelu_, a.fc, a.ln2, w.fc_weight, N, C, 4 * C);
  k.layernorm_backward(dresidual_, g.ln2_weight, g.ln2_bias, dln_, a.residual2, w.ln2_weight, a.ln2_mean, a.ln2_rstd,
                       N, C);
  // Attention branch: r2 = x + proj(attn(qkv(ln1(x)))).
  k.fill_zero(dattention_out_, NC);
  k.matmul_backward(dattention_out_, g.attn_proj_weight, g.attn_proj_bias, dresidual_, a.attention_out,
                    w.attn_proj_weight, N, C, C);
  k.fill_zero(dqkv_, 3 * NC);
  k.attention_backward(dqkv_, attention_scratch_, dattention_out_, a.qkv, a.attention_out, a.attention_lse, B_, T_, C,
                       NH_);
  k.fill_zero(dln_, NC);
  k.matmul_backward(dln_, g.qkv_weight, g.qkv_bias, dqkv_, a.ln1, w.qkv_weight, N, C, 3 * C);
  k.layernorm_backward(dresidual_, g.ln1_weight, g.ln1_bias, dln_, x, w.ln1_weight, a.ln1_mean, a.ln1_rstd, N, C);
}

double Stage::forward(int slot_index, const int* tokens, const float* input, const int* targets) {
  SlotActivations& slot = *slots_.at(slot_index);
  const int N = B_ * T_, C = C_;
  const float* x;
  if (spec_.has_embedding) {
    backend_.upload_tokens(slot.tokens, tokens, N);
    backend_.embedding_forward(slot.embedded, slot.tokens, embedding_head_params_.wte, embedding_head_params_.wpe, B_,
                               T_, C);
    x = slot.embedded;
  } else {
    // Keep our own copy: the sender may reuse its buffer.
    backend_.fill_zero(slot.input, static_cast<std::size_t>(N) * C);
    backend_.accumulate(slot.input, input, static_cast<std::size_t>(N) * C);
    x = slot.input;
  }
  const bool runs_head = spec_.has_head && targets != nullptr;
  const EmbeddingHeadWeights& w = embedding_head_params_;
  for (std::size_t i = 0; i < slot.layers.size(); ++i) {
    // Each layer's last residual add also normalises its sum for whoever reads
    // it next in this stage: the next layer's ln1, or the head's lnf.
    FollowingNorm following;
    if (i + 1 < slot.layers.size()) {
      LayerActivations& next = slot.layers[i + 1];
      following = {layer_params_[i + 1].ln1_weight, layer_params_[i + 1].ln1_bias, next.ln1, next.ln1_mean,
                   next.ln1_rstd};
    } else if (runs_head) {
      following = {w.lnf_weight, w.lnf_bias, slot.lnf, slot.lnf_mean, slot.lnf_rstd};
    }
    layer_forward(layer_params_[i], x, slot.layers[i], i > 0, following.out != nullptr ? &following : nullptr);
    x = slot.layers[i].out;
  }
  if (!runs_head) return 0.0;
  if (slot.layers.empty()) {
    backend_.layernorm_forward(slot.lnf, slot.lnf_mean, slot.lnf_rstd, x, w.lnf_weight, w.lnf_bias, N, C);
  }
  backend_.matmul_forward(slot.logits, slot.lnf, w.lm_head, nullptr, N, C, V_);
  backend_.upload_tokens(slot.targets, targets, N);
  backend_.crossentropy_forward(slot.losses, slot.logits, slot.targets, N, V_);
  std::vector<float> losses(N);
  backend_.download(losses.data(), slot.losses, N);
  double sum = 0;
  for (float x_ : losses) sum += x_;
  return sum / N;
}

const float* Stage::output(int slot_index) const {
  const SlotActivations& slot = *slots_.at(slot_index);
  if (slot.layers.empty()) return spec_.has_embedding ? slot.embedded : slot.input;
  return slot.layers.back().out;
}

void Stage::backward(int slot_index, const float* doutput, float loss_scale, const GradientReady* ready) {
  auto done = [&](std::size_t begin, std::size_t end) {
    if (ready != nullptr && end > begin) (*ready)(begin, end);
  };
  SlotActivations& slot = *slots_.at(slot_index);
  const int N = B_ * T_, C = C_;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const float* last_input = slot.layers.empty() ? (spec_.has_embedding ? slot.embedded : slot.input)
                                                 : slot.layers.back().out;
  const EmbeddingHeadWeights &w = embedding_head_params_, &g = embedding_head_grads_;
  if (spec_.has_head) {
    backend_.crossentropy_backward(dlogits_, slot.logits, slot.targets, loss_scale, N, V_);
    backend_.fill_zero(dln_, NC);
    backend_.matmul_backward(dln_, g.lm_head, nullptr, dlogits_, slot.lnf, w.lm_head, N, C, V_);
    backend_.fill_zero(dresidual_, NC);
    backend_.layernorm_backward(dresidual_, g.lnf_weight, g.lnf_bias, dln_, last_input, w.lnf_weight, slot.lnf_mean,
                                slot.lnf_rstd, N, C);
    done(layer_begin_.back(), parameter_count_);
  } else {
    backend_.fill_zero(dresidual_, NC);
    backend_.accumulate(dresidual_, doutput, NC);
  }
  for (int i = static_cast<int>(slot.layers.size()) - 1; i >= 0; --i) {
    const float* x = i > 0 ? slot.layers[i - 1].out : (spec_.has_embedding ? slot.embedded : slot.input);
    layer_backward(layer_params_[i], layer_grads_[i], x, slot.layers[i]);
    done(layer_begin_[i], layer_begin_[i + 1]);
  }
  if (spec_.has_embedding) {
    backend_.embedding_backward(g.wte, g.wpe, dresidual_, slot.tokens, B_, T_, C);
  }
  done(0, layer_begin_.front());
}

}  // namespace geotrain::model
