// HDF5 helpers shared by the checkpoint and timing files (internal to io).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "geotrain/common/check.hpp"

namespace geotrain::io::hdf5 {

// The HDF5 member of the checked-call family (common/check.hpp): a negative
// result is described like the others, after `context` (the file and the
// object), and the call's value is returned otherwise. Unlike the others it
// is always thrown, never handed to the failure handler, because every
// caller recovers: reading (`reading` true), a damaged or foreign file is
// the user's input, InputError, exit code 2 with one line naming the file,
// met alike on every rank before they agree to stop; writing, the writer
// removes its temporary file and rank 0 hands its verdict to the other ranks
// (RunError).
[[noreturn]] void h5_failed(const CallSite& site, const std::string& context, bool reading);
#define GT_H5_CHECK(call, context, reading)                                                                   \
  ([&]() {                                                                                                    \
    auto gt_h5_result_ = (call);                                                                              \
    if (gt_h5_result_ < 0) {                                                                                  \
      ::geotrain::io::hdf5::h5_failed({"HDF5", #call, __FILE__, __LINE__}, (context), (reading));             \
    }                                                                                                         \
    return gt_h5_result_;                                                                                     \
  }())

// An HDF5 handle closed on scope exit.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle() : id_(-1), close_(nullptr) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      if (id_ >= 0) close_(id_);
      id_ = other.id_;
      close_ = other.close_;
      other.id_ = -1;
    }
    return *this;
  }
  operator hid_t() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// HDF5 prints its own error stack by default; ours say what and where once.
// Call it on every thread that uses HDF5.
void quiet_hdf5();

// Held around every use of the library (each public io call that opens a
// file): the parallel (MPI-IO) build of HDF5 is not thread-safe, and a
// checkpoint's background writer may meet the training thread's timing file
// or a reader. Recursive: a call may use another. Also quiets HDF5.
std::unique_lock<std::recursive_mutex> use_library();

hid_t utf8_string_type();  // caller closes

// The innermost message of this thread's HDF5 error stack, which it clears.
std::string last_error_text();
void write_int_attribute(hid_t object, const char* name, std::int64_t value, const std::string& context);
void write_double_attribute(hid_t object, const char* name, double value, const std::string& context);
void write_string_attribute(hid_t object, const char* name, const std::string& value, const std::string& context);

// A dataset of `dims` (row-major) from `data`, stored as `file_type`, read
// from memory as `memory_type`; an attribute "unit" when `unit` is not empty.
// `properties`: the dataset's creation properties (layout, filters).
void write_array(hid_t group, const std::string& name, const std::vector<hsize_t>& dims, hid_t file_type,
                 hid_t memory_type, const void* data, const std::string& unit, const std::string& context,
                 hid_t properties = H5P_DEFAULT);
void write_doubles(hid_t group, const std::string& name, const std::vector<double>& values, const std::string& unit,
                   const std::string& context, std::vector<hsize_t> dims = {});
void write_ints(hid_t group, const std::string& name, const std::vector<std::int32_t>& values, const std::string& unit,
                const std::string& context, std::vector<hsize_t> dims = {});
void write_int64s(hid_t group, const std::string& name, const std::vector<std::int64_t>& values,
                  const std::string& unit, const std::string& context);
void write_strings(hid_t group, const std::string& name, const std::vector<std::string>& values,
                   const std::string& context);

// fsync of a file or a directory (RunError naming it on failure).
void fsync_path(const std::string& path);

}  // namespace geotrain::io::hdf5
