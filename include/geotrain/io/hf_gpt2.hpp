// Hugging Face GPT-2 model folders (config.json + model.safetensors, the
// layout of GPT2LMHeadModel.save_pretrained) to and from geotrain
// checkpoints (io/checkpoint.hpp), for `geotrain convert`.
//
// Tensor names: Hugging Face's, optionally under "transformer.", against
// geotrain's:
//   wte.weight, wpe.weight          wte, wpe
//   h.L.ln_1 / ln_2 .weight/.bias   h.L.ln1 / ln2 .weight/.bias
//   h.L.attn.c_attn  .weight/.bias  h.L.attn.qkv     .weight/.bias
//   h.L.attn.c_proj  .weight/.bias  h.L.attn.proj    .weight/.bias
//   h.L.mlp.c_fc     .weight/.bias  h.L.mlp.fc       .weight/.bias
//   h.L.mlp.c_proj   .weight/.bias  h.L.mlp.proj     .weight/.bias
//   ln_f.weight/.bias               lnf.weight/.bias
// GPT-2's projections are Conv1D layers stored [in, out]; geotrain's
// matrices are [out, in] (as nn.Linear): each .weight of a projection is
// transposed, nothing else changes (c_attn's columns are q | k | v, heads
// contiguous, as geotrain's qkv rows). lm_head.weight, where present, must
// equal wte.weight (geotrain ties them); the attention-mask buffers
// h.L.attn.bias / h.L.attn.masked_bias of older files are skipped.
#pragma once
#include <string>
#include <vector>

#include "geotrain/common/model_shape.hpp"
#include "geotrain/io/checkpoint.hpp"

namespace geotrain::io {

// One parameter in both namings; `conv1d`: a matrix stored transposed by
// Hugging Face. `shape` is geotrain's.
struct HfTensorName {
  std::string hf, geotrain;
  std::vector<int> shape;
  bool conv1d = false;
};

// Every parameter of `model`, in geotrain's layout order (wte, wpe, layers, lnf).
std::vector<HfTensorName> hf_gpt2_tensor_names(const ModelShape& model);

// Reads `path` (a config.json) and checks that geotrain implements the
// architecture it describes: model_type gpt2, GELU tanh approximation,
// layer-norm epsilon 1e-5, inner width 4 x n_embd, scaled attention, tied
// head. Throws InputError "<path>: <field>: <what>".
ModelShape read_hf_gpt2_config(const std::string& path);

// The folder `dir` as a weights-only checkpoint. `sequence_length` > 0
// keeps the first that many positions of wpe (fine-tuning at a shorter
// context); 0 keeps n_positions. Throws InputError naming the file and the
// field or tensor.
Checkpoint read_hf_gpt2(const std::string& dir, int sequence_length = 0);

// Writes `dir`/model.safetensors (F32, "transformer."-prefixed names, no
// lm_head: tied) and `dir`/config.json, creating `dir`. `origin` names the
// checkpoint in errors (InputError: a tensor missing or of another shape).
// Takes the checkpoint by value so that its tensors move into the file's.
void write_hf_gpt2(Checkpoint checkpoint, const std::string& origin, const std::string& dir);

}  // namespace geotrain::io
