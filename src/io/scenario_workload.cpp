// [workload]: the degrees (pp, dp) and the model whose traffic the plan is
// for, or the dtfm-original constants; the command line overrides the file.
#include <cmath>
#include <optional>
#include <string>

#include "model_table.hpp"
#include "scenario_internal.hpp"

namespace geotrain::io::scenario_file {
namespace {

struct FileWorkload {
  bool present = false;
  std::optional<int> pipeline_stages;
  std::optional<int> data_parallel;
  std::string preset = "model";
  plan::TrainingShape model;
};

// Overrides of the default GPT3-XL shape and its traffic. Only meaningful
// for preset "model": the dtfm-original constants do not depend on a model.
bool read_training_shape(const Reader& r, const toml::table& table, plan::TrainingShape& model) {
  bool any = read_model_shape(r, table, "workload", "model_name", false, model);
  auto integer = [&](const char* key, int& target) {
    if (auto value = r.optional_positive_int(table, key, field_key("workload", key))) {
      target = *value;
      any = true;
    }
  };
  integer("activation_bytes", model.activation_bytes);
  integer("gradient_bytes", model.gradient_bytes);
  if (auto tokens = r.optional_number(table, "tokens_per_step", "workload.tokens_per_step")) {
    if (!(std::isfinite(*tokens) && *tokens > 0.0)) {
      r.fail("workload.tokens_per_step", "must be a finite number > 0, got " + shortest(*tokens));
    }
    model.tokens_per_step = *tokens;
    any = true;
  }
  return any;
}

FileWorkload read_file_workload(const Reader& r, const toml::table& root) {
  FileWorkload file;
  const toml::table* table = r.optional_table(root, "workload", "workload");
  if (table == nullptr) return file;
  file.present = true;
  r.check_keys(*table, "workload",
               {"pp", "dp", "preset", "layers", "hidden", "heads", "sequence_length", "vocabulary",
                "tokens_per_step", "activation_bytes", "gradient_bytes", "model_name"});
  file.pipeline_stages = r.optional_positive_int(*table, "pp", "workload.pp");
  file.data_parallel = r.optional_positive_int(*table, "dp", "workload.dp");
  file.preset = r.optional_string(*table, "preset", "workload.preset").value_or("model");
  if (file.preset != "model" && file.preset != "dtfm-original") {
    r.fail("workload.preset", "must be \"model\" or \"dtfm-original\", got \"" + file.preset + "\"");
  }
  const bool shape_given = read_training_shape(r, *table, file.model);
  if (shape_given && file.preset != "model") {
    r.fail("workload.preset", "model fields (layers, hidden, ...) are only allowed with preset = \"model\"",
           "the dtfm-original constants do not depend on a model");
  }
  return file;
}

struct Degrees {
  int pipeline_stages = 0;
  int data_parallel = 0;
  bool given = true;  // false: neither known and the caller chooses (degrees_optional)
};

// Precedence: command line, then file, then derived from the device count.
Degrees resolve_degrees(const Reader& r, const FileWorkload& file, const WorkloadOverrides& overrides,
                        int devices) {
  if (overrides.network_only) return {1, devices};
  if (overrides.pipeline_stages && *overrides.pipeline_stages < 1) {
    r.fail("workload.pp", "--pp must be >= 1, got " + std::to_string(*overrides.pipeline_stages));
  }
  if (overrides.data_parallel && *overrides.data_parallel < 1) {
    r.fail("workload.dp", "--dp must be >= 1, got " + std::to_string(*overrides.data_parallel));
  }
  const std::optional<int> pp = overrides.pipeline_stages ? overrides.pipeline_stages : file.pipeline_stages;
  const std::optional<int> dp = overrides.data_parallel ? overrides.data_parallel : file.data_parallel;
  const std::string pp_origin = overrides.pipeline_stages ? "--pp" : "workload.pp";
  const std::string dp_origin = overrides.data_parallel ? "--dp" : "workload.dp";
  const std::string count = std::to_string(devices) + " devices";

  if (!pp && !dp) {
    if (overrides.degrees_optional) return {1, devices, false};
    if (!file.present) {
      r.fail("workload.pp", "no [workload] table and no --pp/--dp given", "the network has " + count);
    }
    r.fail("workload.pp", "missing required field", "set pp and dp in [workload] or give --pp/--dp");
  }
  Degrees degrees;
  if (pp && dp) {
    degrees = {*pp, *dp};
    const long long product = static_cast<long long>(*pp) * *dp;
    if (product != devices) {
      r.fail("workload.pp", "pp*dp = " + std::to_string(product) + " but the network has " + count,
             "pp from " + pp_origin + ", dp from " + dp_origin);
    }
  } else if (pp) {
    if (devices % *pp != 0) {
      r.fail("workload.dp", "cannot derive dp: the network has " + count + ", not divisible by pp = " +
             std::to_string(*pp), "pp from " + pp_origin);
    }
    degrees = {*pp, devices / *pp};
  } else {
    if (devices % *dp != 0) {
      r.fail("workload.pp", "cannot derive pp: the network has " + count + ", not divisible by dp = " +
             std::to_string(*dp), "dp from " + dp_origin);
    }
    degrees = {devices / *dp, *dp};
  }
  return degrees;
}

}  // namespace

plan::Workload read_workload(const Reader& r, const toml::table& root, const WorkloadOverrides& overrides,
                             int devices, Scenario& scenario) {
  const FileWorkload file = read_file_workload(r, root);
  scenario.workload_from_file = file.present;
  const Degrees degrees = resolve_degrees(r, file, overrides, devices);
  scenario.degrees_given = degrees.given;
  if (file.preset == "dtfm-original") {
    return plan::dtfm_original_workload(degrees.pipeline_stages, degrees.data_parallel);
  }
  const plan::Workload workload = plan::workload_from_model(file.model, degrees.pipeline_stages, degrees.data_parallel);
  // Only an extreme tokens_per_step gets here (the integers cannot overflow
  // a double): the activation size would be +inf or 0 and every plan equal.
  if (!(std::isfinite(workload.c_pp_bytes) && workload.c_pp_bytes > 0.0 && std::isfinite(workload.c_dp_bytes))) {
    r.fail("workload.tokens_per_step", "gives an activation size of " + shortest(workload.c_pp_bytes) + " bytes",
           "tokens_per_step / dp * hidden * activation_bytes must be a finite number > 0");
  }
  return workload;
}

}  // namespace geotrain::io::scenario_file
