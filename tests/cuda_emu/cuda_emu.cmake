# The CUDA emulation (the cuda-emu presets): the runtime library, and
# geotrain_add_emulated_cuda(target sources...), which compiles .cu files with
# the host compiler after translate_cu.sh.
set(GEOTRAIN_CUDA_EMU_DIR ${CMAKE_CURRENT_LIST_DIR})

add_library(geotrain_cuda_emu STATIC
  ${GEOTRAIN_CUDA_EMU_DIR}/runtime/settings.cpp
  ${GEOTRAIN_CUDA_EMU_DIR}/runtime/block_state.cpp
  ${GEOTRAIN_CUDA_EMU_DIR}/runtime/fiber.cpp
  ${GEOTRAIN_CUDA_EMU_DIR}/runtime/scheduler.cpp
  ${GEOTRAIN_CUDA_EMU_DIR}/runtime/memory_and_streams.cpp
  ${GEOTRAIN_CUDA_EMU_DIR}/runtime/cublas.cpp)
target_include_directories(geotrain_cuda_emu PUBLIC ${GEOTRAIN_CUDA_EMU_DIR}/include)
target_link_libraries(geotrain_cuda_emu PUBLIC Threads::Threads)

function(geotrain_add_emulated_cuda target)
  file(GLOB emu_headers CONFIGURE_DEPENDS ${GEOTRAIN_CUDA_EMU_DIR}/include/*.h* ${GEOTRAIN_CUDA_EMU_DIR}/include/*/*/*)
  foreach(source ${ARGN})
    get_filename_component(name ${source} NAME)
    set(translated ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/${name}.cpp)
    add_custom_command(OUTPUT ${translated}
                       COMMAND ${GEOTRAIN_CUDA_EMU_DIR}/translate_cu.sh ${source} ${translated}
                       DEPENDS ${source} ${GEOTRAIN_CUDA_EMU_DIR}/translate_cu.sh ${GEOTRAIN_CUDA_EMU_DIR}/chevrons.sed
                       COMMENT "cuda-emu: translating ${name}" VERBATIM)
    # The shim's headers shadow the CUDA toolkit's for these files only;
    # -Wpedantic objects to nothing in the kernels but to the shim's GNU attributes.
    set_source_files_properties(${translated} PROPERTIES
      OBJECT_DEPENDS "${emu_headers}"
      COMPILE_OPTIONS "-include;cuda_emu.hpp;-Wno-pedantic")
    target_sources(${target} PRIVATE ${translated})
  endforeach()
  target_link_libraries(${target} PRIVATE geotrain_cuda_emu)
  target_include_directories(${target} BEFORE PRIVATE ${GEOTRAIN_CUDA_EMU_DIR}/include)
endfunction()
