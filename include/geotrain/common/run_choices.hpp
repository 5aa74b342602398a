// The run's closed choices besides the planner's (plan::Schedule,
// plan::Placement): typed once when the config is read, never compared as
// text afterwards.
#pragma once
#include <string>

#include "geotrain/common/enum_names.hpp"

namespace geotrain {

enum class DeviceRequest { automatic, cpu, cuda };  // device.kind: auto picks CUDA where usable
enum class Transport { automatic, mpi, nccl };      // network.transport: auto = NCCL on GPUs where built
// network.dp_exchange: how a data-parallel group sums (job/hierarchical_exchange.hpp):
// direct between all members, or inside each site first and across sites
// once per site; auto = whichever the simulator predicts faster for the group.
enum class DataParallelExchange { automatic, direct, hierarchical };
// Precision of matmul/attention inputs to the math units. The master
// weights, optimizer state, layernorm and softmax statistics are always
// fp32; bf16 rounds the GEMM operands (CUDA: bf16 tensor cores with fp32
// accumulation; CPU: emulated by rounding, for parity tests only).
enum class MatmulPrecision { fp32, bf16 };
// device.activation_storage: how a stage keeps each layer's activations from
// its forward until its backward (model/gpt.hpp). bf16 halves their bytes;
// the forward itself and the master weights stay fp32.
enum class ActivationStorage { fp32, bf16 };
// How a tensor goes over a slow link (runtime/wire_codec.hpp): as is, or
// quantised to 8 / 4 bits per value, or its largest values only.
enum class WireFormat { fp32, int8, int4, topk };
// model.lm_head: the LM head as the model file says, tied to the token
// embedding (GPT-2: with 2+ stages its gradient crosses from the last stage
// to the first every step), or the last stage's own V x H matrix.
enum class LmHead { model_file, tied, untied };
// checkpoint.form (io/checkpoint.hpp, io/parallel_checkpoint.hpp): one file
// written by rank 0 after a gather (single); one shard per writing rank plus
// a manifest (sharded); one file written by every rank at once through
// parallel HDF5 (parallel); one shard per site, each written by its site's
// ranks, plus a manifest (per_site). auto: runtime/checkpointing.hpp's
// resolve_checkpoint_form.
enum class CheckpointForm { automatic, single, sharded, parallel, per_site };
// optimizer.kind: the inner optimizer. SGD (with decoupled weight decay) is
// linear in the gradient, so local steps with H = 1 equal synchronous
// training exactly; AdamW is not (its update of an average is not the
// average of its updates).
enum class InnerOptimizer { adamw, sgd };
// pipeline.layout: fixed = pipeline.stages (and layers_per_stage, the
// train.* batch) as given, every rank used; auto = rank 0's layout search
// chooses stages, replicas, micro-batches, the layer split and which ranks
// train (the rest stay idle), from the probed network and device speeds.
enum class LayoutChoice { fixed, automatic };

// Names as config files and messages spell them; "?" for no value.
inline constexpr EnumName<DeviceRequest> kDeviceRequestNames[] = {
    {DeviceRequest::automatic, "auto"}, {DeviceRequest::cpu, "cpu"}, {DeviceRequest::cuda, "cuda"}};
inline constexpr EnumName<Transport> kTransportNames[] = {
    {Transport::automatic, "auto"}, {Transport::mpi, "mpi"}, {Transport::nccl, "nccl"}};
inline constexpr EnumName<DataParallelExchange> kDataParallelExchangeNames[] = {
    {DataParallelExchange::automatic, "auto"},
    {DataParallelExchange::direct, "direct"},
    {DataParallelExchange::hierarchical, "hierarchical"}};
inline constexpr EnumName<MatmulPrecision> kMatmulPrecisionNames[] = {{MatmulPrecision::fp32, "fp32"},
                                                                       {MatmulPrecision::bf16, "bf16"}};
inline constexpr EnumName<ActivationStorage> kActivationStorageNames[] = {{ActivationStorage::fp32, "fp32"},
                                                                           {ActivationStorage::bf16, "bf16"}};

inline constexpr EnumName<WireFormat> kWireFormatNames[] = {
    {WireFormat::fp32, "fp32"}, {WireFormat::int8, "int8"}, {WireFormat::int4, "int4"}, {WireFormat::topk, "topk"}};

inline constexpr EnumName<LmHead> kLmHeadNames[] = {
    {LmHead::model_file, "model-file"}, {LmHead::tied, "tied"}, {LmHead::untied, "untied"}};

inline constexpr EnumName<CheckpointForm> kCheckpointFormNames[] = {
    {CheckpointForm::automatic, "auto"}, {CheckpointForm::single, "single"}, {CheckpointForm::sharded, "sharded"},
    {CheckpointForm::parallel, "parallel"}, {CheckpointForm::per_site, "per_site"}};

inline constexpr EnumName<InnerOptimizer> kInnerOptimizerNames[] = {{InnerOptimizer::adamw, "adamw"},
                                                                     {InnerOptimizer::sgd, "sgd"}};

inline constexpr EnumName<LayoutChoice> kLayoutChoiceNames[] = {{LayoutChoice::fixed, "fixed"},
                                                                 {LayoutChoice::automatic, "auto"}};

inline std::string to_string(LayoutChoice choice) { return name_in(kLayoutChoiceNames, choice); }
inline std::string to_string(InnerOptimizer kind) { return name_in(kInnerOptimizerNames, kind); }
inline std::string to_string(CheckpointForm form) { return name_in(kCheckpointFormNames, form); }
inline std::string to_string(WireFormat format) { return name_in(kWireFormatNames, format); }
inline std::string to_string(LmHead head) { return name_in(kLmHeadNames, head); }
inline std::string to_string(DeviceRequest device) { return name_in(kDeviceRequestNames, device); }
inline std::string to_string(Transport transport) { return name_in(kTransportNames, transport); }
inline std::string to_string(DataParallelExchange exchange) { return name_in(kDataParallelExchangeNames, exchange); }
inline std::string to_string(MatmulPrecision precision) { return name_in(kMatmulPrecisionNames, precision); }
inline std::string to_string(ActivationStorage storage) { return name_in(kActivationStorageNames, storage); }
inline bool parse_device_request(const std::string& text, DeviceRequest* out) {
  return parse_name_in(kDeviceRequestNames, text, out);
}

}  // namespace geotrain
