#include "fiber.hpp"

#include <sys/mman.h>

#include <cstdint>

#include "cuda_emu_engine.hpp"

#if CUDA_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

extern "C" void cuda_emu_switch(void** save_sp, void* load_sp);
extern "C" void cuda_emu_trampoline();
asm(R"(
  .text
  .globl cuda_emu_switch
  .type cuda_emu_switch,@function
cuda_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cuda_emu_switch,.-cuda_emu_switch
  .globl cuda_emu_trampoline
  .type cuda_emu_trampoline,@function
cuda_emu_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size cuda_emu_trampoline,.-cuda_emu_trampoline
)");

namespace cuda_emu {
namespace {
constexpr std::size_t kGuardBytes = 4096;
const void* scheduler_stack_bottom = nullptr;
std::size_t scheduler_stack_size = 0;
}  // namespace

void prepare_fiber(Fiber& fiber, void (*entry)(unsigned), unsigned argument) {
  if (fiber.stack == nullptr) {
    void* memory = mmap(nullptr, kFiberStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) fatal("mmap of a fiber stack failed");
    mprotect(memory, kGuardBytes, PROT_NONE);  // an overflow faults instead of corrupting a neighbour
    fiber.stack = static_cast<char*>(memory) + kGuardBytes;
  }
#if CUDA_EMU_ASAN
  __asan_unpoison_memory_region(fiber.stack, kFiberStackBytes);  // a previous block's frames
#endif
  // The frame cuda_emu_switch pops: six registers, then the return into the
  // trampoline, which calls r13(r12) with the stack 16-byte aligned.
  auto* top = reinterpret_cast<std::uint64_t*>(fiber.stack + kFiberStackBytes);
  top[-1] = 0;
  top[-2] = 0;
  top[-3] = reinterpret_cast<std::uint64_t>(&cuda_emu_trampoline);
  top[-4] = 0;                                              // rbp
  top[-5] = 0;                                              // rbx
  top[-6] = argument;                                       // r12
  top[-7] = reinterpret_cast<std::uint64_t>(entry);         // r13
  top[-8] = 0;                                              // r14
  top[-9] = 0;                                              // r15
  fiber.stack_pointer = &top[-9];
}

void switch_context(void** save, void* target, const void* target_stack, std::size_t target_stack_bytes,
                    bool exiting) {
#if CUDA_EMU_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(exiting ? nullptr : &fake_stack, target_stack, target_stack_bytes);
  cuda_emu_switch(save, target);
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
  (void)target_stack;
  (void)target_stack_bytes;
  (void)exiting;
  cuda_emu_switch(save, target);
#endif
}

void fiber_started(bool from_scheduler) {
#if CUDA_EMU_ASAN
  if (from_scheduler) {
    __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack_bottom, &scheduler_stack_size);
  } else {
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
  }
#else
  (void)from_scheduler;
#endif
}

const void* scheduler_stack() { return scheduler_stack_bottom; }
std::size_t scheduler_stack_bytes() { return scheduler_stack_size; }

}  // namespace cuda_emu
