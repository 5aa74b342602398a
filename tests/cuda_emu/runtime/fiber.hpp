// A fiber: a stack and a saved stack pointer; switching saves the
// callee-saved registers of x86-64 System V (kernels do not change the FP
// environment, so nothing else needs saving). Under AddressSanitizer every
// switch is announced, so that ASan follows the stacks.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_EMU_ASAN 1
#else
#define CUDA_EMU_ASAN 0
#endif

#if !defined(__x86_64__)
#error "the CUDA emulation's fibers switch x86-64 registers"
#endif

namespace cuda_emu {

inline constexpr std::size_t kFiberStackBytes = CUDA_EMU_ASAN ? 512 * 1024 : 128 * 1024;

struct Fiber {
  void* stack_pointer = nullptr;
  char* stack = nullptr;  // kFiberStackBytes, above a guard page
};

// Makes `fiber` start entry(argument) at its next switch_to.
void prepare_fiber(Fiber& fiber, void (*entry)(unsigned), unsigned argument);
// Saves the running context into *save and runs the one at `target`;
// stack/bytes: the target's stack (for ASan). `exiting`: the running fiber never resumes.
void switch_context(void** save, void* target, const void* target_stack, std::size_t target_stack_bytes,
                    bool exiting);
// Called first on a fiber that has just been switched to.
void fiber_started(bool from_scheduler);
// The OS thread's own stack (known once a fiber has started), for switching back to it under ASan.
const void* scheduler_stack();
std::size_t scheduler_stack_bytes();

}  // namespace cuda_emu
