# End-to-end tests of the geotrain command line: real binary, real files.
set(GT $<TARGET_FILE:geotrain>)
set(SCN ${PROJECT_SOURCE_DIR}/inputs/scenarios)
set(BAD ${CMAKE_CURRENT_SOURCE_DIR}/e2e/bad)
set(EXPECT ${CMAKE_CURRENT_SOURCE_DIR}/e2e/expect_failure.sh)
find_package(Python3 REQUIRED COMPONENTS Interpreter)

# The plan on each paper scenario: valid, and at most the original
# scheduler's best (reference §7; spot: the proven optimum, §7(c)).
foreach(case "world-wide;49.21839" "spot;31.63417" "on-demand;3.43981" "multi-dc;16.08685" "regional;34.80205")
  list(GET case 0 name)
  list(GET case 1 max_cost)
  add_test(NAME cli.plan.${name}
    COMMAND sh -c "\"$1\" plan --scenario \"$2\" --json --candidates 2000 --random-samples 1000 > \"$3\" && \"$4\" \"$5\" \"$3\" $6"
            _ ${GT} ${SCN}/${name}.toml ${CMAKE_CURRENT_BINARY_DIR}/plan-${name}.json ${Python3_EXECUTABLE}
            ${CMAKE_CURRENT_SOURCE_DIR}/e2e/check_plan_json.py ${max_cost})
endforeach()

# Same seed, same plan; the table has its sections.
add_test(NAME cli.plan.deterministic
  COMMAND sh -c "a=$(\"$1\" plan --scenario \"$2\" --json --candidates 500 --seed 7 --no-baselines | grep -v planner_seconds); b=$(\"$1\" plan --scenario \"$2\" --json --candidates 500 --seed 7 --no-baselines | grep -v planner_seconds); [ \"$a\" = \"$b\" ] && [ -n \"$a\" ]"
          _ ${GT} ${SCN}/four-sites-16.toml)
add_test(NAME cli.plan.table COMMAND ${GT} plan --scenario ${SCN}/two-sites-8.toml --candidates 300)
set_tests_properties(cli.plan.table PROPERTIES
  PASS_REGULAR_EXPRESSION "Pipeline.*Cost per iteration.*lower bound.*Baselines.*rank order.*random.*Planner time")
add_test(NAME cli.plan.asymmetric-with-pp COMMAND ${GT} plan --scenario ${SCN}/asymmetric-4.toml --pp 2 --candidates 100)
add_test(NAME cli.plan.paper-exact COMMAND ${GT} plan --scenario ${SCN}/world-wide.toml --paper-exact --candidates 300 --no-baselines)
set_tests_properties(cli.plan.paper-exact PROPERTIES PASS_REGULAR_EXPRESSION "paper local search.*paper-exact")

# Bad input: exit code 2, one line naming the file and the field.
function(expect_input_error name pattern)
  add_test(NAME cli.bad.${name} COMMAND ${EXPECT} 2 "${pattern}" -- ${GT} ${ARGN})
endfunction()
expect_input_error(missing-file "no-such-file\\.toml" plan --scenario ${BAD}/no-such-file.toml)
expect_input_error(unknown-key "unknown-key\\.toml.*latncy" plan --scenario ${BAD}/unknown-key.toml)
expect_input_error(syntax "syntax\\.toml.*line" plan --scenario ${BAD}/syntax.toml)
expect_input_error(ragged "ragged\\.toml.*latency_ms\\[1\\]" plan --scenario ${BAD}/ragged.toml)
expect_input_error(non-square "non-square\\.toml.*latency_ms" plan --scenario ${BAD}/non-square.toml)
expect_input_error(nan-bandwidth "nan-bandwidth\\.toml.*bandwidth_gbps\\[0\\]\\[1\\]" plan --scenario ${BAD}/nan-bandwidth.toml)
expect_input_error(zero-bandwidth "zero-bandwidth\\.toml.*bandwidth_gbps\\[0\\]\\[1\\]" plan --scenario ${BAD}/zero-bandwidth.toml)
expect_input_error(negative-latency "negative-latency\\.toml.*latency_ms\\[0\\]\\[1\\]" plan --scenario ${BAD}/negative-latency.toml)
expect_input_error(pp-dp-mismatch "tiny-2x2\\.toml.*(pp|dp)" plan --scenario ${SCN}/tiny-2x2.toml --pp 3)
expect_input_error(unknown-option "command line.*--bogus" plan --scenario ${SCN}/tiny-2x2.toml --bogus)
expect_input_error(missing-scenario "command line.*--scenario" plan)
