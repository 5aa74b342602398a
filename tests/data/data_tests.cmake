# tools/prepare_data.py end to end (tests/data/check_prepare_data.py): text
# files -> shards + tokenizer -> the same text, through the tokenizers library
# and through geotrain's own tokenizer (shard_text_check). Cases that need
# the `tokenizers` package report SKIPPED where the python lacks it.
add_executable(geotrain_shard_text_check ${CMAKE_CURRENT_SOURCE_DIR}/data/shard_text_check.cpp)
target_link_libraries(geotrain_shard_text_check PRIVATE geotrain_io)
set(data_cases byte bpe gpt2 bad-inputs bad-tokenizer-files unicode-tables)
if(TARGET geotrain_runtime)
  list(APPEND data_cases train-bpe)
endif()
foreach(case IN LISTS data_cases)
  add_test(NAME data.prepare.${case}
           COMMAND ${GEOTRAIN_ANALYSIS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/data/check_prepare_data.py ${case}
                   --repo ${PROJECT_SOURCE_DIR} --geotrain $<TARGET_FILE:geotrain>
                   --checker $<TARGET_FILE:geotrain_shard_text_check> --work ${CMAKE_CURRENT_BINARY_DIR}/data-tests)
  set_tests_properties(data.prepare.${case} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()
