# The emulated kernels again under the adversarial schedules, and the check
# that every hand-written kernel ran (tests/cuda_emu/README.md).
set(emu_golden $<TARGET_FILE:geotrain_kernel_tests> --gtest_filter=*/cuda:BackendFactory.*)
set(emu_parity $<TARGET_FILE:geotrain_cuda_parity_tests>)
foreach(schedule "warp-ahead;CUDA_EMU_ORDER=warp-ahead" "reverse;CUDA_EMU_ORDER=reverse"
                 "deferred-streams;CUDA_EMU_DEFERRED=1")
  list(GET schedule 0 name)
  list(GET schedule 1 environment)
  add_test(NAME cuda-emu.${name}.golden COMMAND ${emu_golden})
  add_test(NAME cuda-emu.${name}.parity COMMAND ${emu_parity})
  set_tests_properties(cuda-emu.${name}.golden cuda-emu.${name}.parity PROPERTIES
                       ENVIRONMENT ${environment} TIMEOUT 600)
endforeach()
add_test(NAME cuda-emu.every-kernel-executed
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/check_kernel_coverage.sh ${PROJECT_SOURCE_DIR}/src/kernels
                 ${CMAKE_CURRENT_BINARY_DIR}/cuda-emu-launches.txt -- ${emu_golden} -- ${emu_parity})
set_tests_properties(cuda-emu.every-kernel-executed PROPERTIES TIMEOUT 600)
