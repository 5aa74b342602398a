// A base for classes that own something that must not be duplicated (a
// thread, a handle, a per-thread scope): copying and assigning are deleted,
// and with them the implicit moves.
#pragma once

namespace geotrain {

class NonCopyable {
 public:
  NonCopyable(const NonCopyable&) = delete;
  NonCopyable& operator=(const NonCopyable&) = delete;

 protected:
  NonCopyable() = default;
  ~NonCopyable() = default;
};

}  // namespace geotrain
