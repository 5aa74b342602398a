#include "hdf5_support.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "geotrain/common/errors.hpp"

namespace geotrain::io::hdf5 {

// The innermost message of HDF5's error stack: the most specific cause
// ("file signature not found"), where the outer ones repeat the call.
std::string last_error_text() {
  std::string text;
  auto keep_last = [](unsigned, const H5E_error2_t* error, void* out) -> herr_t {
    if (error->desc != nullptr && *error->desc != '\0') *static_cast<std::string*>(out) = error->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_last, &text);
  // Read once, then freed: a thread's stack outlives nothing in HDF5 1.10
  // (its entries leak when a background writer's thread ends).
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? "no HDF5 error message" : text;
}

void h5_failed(const CallSite& site, const std::string& context, bool reading) {
  const std::string message = context + ": " + describe_failed_call(site, last_error_text());
  if (reading) throw InputError(message);
  throw RunError(message);
}

void quiet_hdf5() {
  // Per thread: a thread-safe HDF5 keeps one error stack (and its printer)
  // per thread, and checkpoints are also written by a background thread.
  static thread_local const bool done = [] { return H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0; }();
  (void)done;
}

hid_t utf8_string_type() {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  return type;
}

namespace {

void write_scalar_attribute(hid_t object, const char* name, hid_t file_type, hid_t memory_type, const void* value,
                            const std::string& context) {
  Handle space(GT_H5_CHECK(H5Screate(H5S_SCALAR), context, false), H5Sclose);
  Handle attribute(GT_H5_CHECK(H5Acreate2(object, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT), context, false),
                   H5Aclose);
  GT_H5_CHECK(H5Awrite(attribute, memory_type, value), context, false);
}

std::vector<hsize_t> dims_or_length(std::vector<hsize_t> dims, std::size_t length) {
  return dims.empty() ? std::vector<hsize_t>{static_cast<hsize_t>(length)} : dims;
}

}  // namespace

void write_int_attribute(hid_t object, const char* name, std::int64_t value, const std::string& context) {
  write_scalar_attribute(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, context);
}

void write_double_attribute(hid_t object, const char* name, double value, const std::string& context) {
  write_scalar_attribute(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, context);
}

void write_string_attribute(hid_t object, const char* name, const std::string& value, const std::string& context) {
  Handle type(utf8_string_type(), H5Tclose);
  const char* text = value.c_str();
  write_scalar_attribute(object, name, type, type, &text, context);
}

void write_array(hid_t group, const std::string& name, const std::vector<hsize_t>& dims, hid_t file_type,
                 hid_t memory_type, const void* data, const std::string& unit, const std::string& context,
                 hid_t properties) {
  Handle space(GT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), context, false),
               H5Sclose);
  Handle set(GT_H5_CHECK(H5Dcreate2(group, name.c_str(), file_type, space, H5P_DEFAULT, properties, H5P_DEFAULT),
                         context + ": " + name, false),
             H5Dclose);
  GT_H5_CHECK(H5Dwrite(set, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), context + ": " + name, false);
  if (!unit.empty()) write_string_attribute(set, "unit", unit, context);
}

void write_doubles(hid_t group, const std::string& name, const std::vector<double>& values, const std::string& unit,
                   const std::string& context, std::vector<hsize_t> dims) {
  write_array(group, name, dims_or_length(std::move(dims), values.size()), H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
              values.data(), unit, context);
}

void write_ints(hid_t group, const std::string& name, const std::vector<std::int32_t>& values, const std::string& unit,
                const std::string& context, std::vector<hsize_t> dims) {
  write_array(group, name, dims_or_length(std::move(dims), values.size()), H5T_STD_I32LE, H5T_NATIVE_INT32,
              values.data(), unit, context);
}

void write_int64s(hid_t group, const std::string& name, const std::vector<std::int64_t>& values,
                  const std::string& unit, const std::string& context) {
  write_array(group, name, {static_cast<hsize_t>(values.size())}, H5T_STD_I64LE, H5T_NATIVE_INT64, values.data(), unit,
              context);
}

void write_strings(hid_t group, const std::string& name, const std::vector<std::string>& values,
                   const std::string& context) {
  Handle type(utf8_string_type(), H5Tclose);
  std::vector<const char*> pointers;
  for (const std::string& v : values) pointers.push_back(v.c_str());
  write_array(group, name, {static_cast<hsize_t>(values.size())}, type, type, pointers.data(), "", context);
}

std::unique_lock<std::recursive_mutex> use_library() {
  static std::recursive_mutex library;
  std::unique_lock<std::recursive_mutex> lock(library);
  quiet_hdf5();
  return lock;
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw RunError(path + ": cannot open to flush it to disk");
  const int result = ::fsync(fd);
  ::close(fd);
  if (result != 0) throw RunError(path + ": fsync failed");
}

}  // namespace geotrain::io::hdf5
