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

# The layout search (issue 18): its JSON keys, memory respected; chosen
# automatically when no pp/dp is given anywhere, and said so.
add_test(NAME cli.plan.layout-auto
  COMMAND sh -c "\"$1\" plan --scenario \"$2\" --layout auto --json --candidates 200 > \"$3\" && \"$4\" \"$5\" \"$3\" 64 24"
          _ ${GT} ${SCN}/regional-mixed.toml ${CMAKE_CURRENT_BINARY_DIR}/plan-layout-auto.json ${Python3_EXECUTABLE}
          ${CMAKE_CURRENT_SOURCE_DIR}/e2e/check_layout_json.py)
# A configured tensor-parallel efficiency slows the units: 2-way units at
# half speed predict a longer iteration than at full speed.
add_test(NAME cli.plan.tp-efficiency
  COMMAND sh -c "\"$1\" plan --scenario \"$2\" --model \"$3\" --layout auto --tp 2 --json --candidates 100 > \"$4\".full && \"$1\" plan --scenario \"$2\" --model \"$3\" --layout auto --tp 2 --tp-efficiency 0.5 --json --candidates 100 > \"$4\".half && \"$5\" -c 'import json,sys; f, h = (json.load(open(sys.argv[1] + x))[\"predicted_iteration_s\"] for x in (\".full\", \".half\")); print(f, h); sys.exit(0 if h > 1.2 * f else 1)' \"$4\""
          _ ${GT} ${SCN}/geo-a100-nodes.toml ${PROJECT_SOURCE_DIR}/inputs/models/opt-350-like.toml
          ${CMAKE_CURRENT_BINARY_DIR}/plan-tp-efficiency ${Python3_EXECUTABLE})
add_test(NAME cli.plan.layout-when-no-degrees COMMAND ${GT} plan --scenario ${SCN}/asymmetric-4.toml --candidates 50)
set_tests_properties(cli.plan.layout-when-no-degrees PROPERTIES
  PASS_REGULAR_EXPRESSION "layout search \\(no pp or dp given\\).*Layout: pp [0-9]+ x dp [0-9]+.*Predicted iteration")

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
expect_input_error(tp-efficiency-range "--tp-efficiency" plan --scenario ${SCN}/tiny-2x2.toml --tp-efficiency 2)
expect_input_error(layout-does-not-fit "asymmetric-4\\.toml: no layout fits in device memory.*GiB"
                   plan --scenario ${SCN}/asymmetric-4.toml --layout auto --device-memory-gib 2)

# geotrain simulate: the JSON has every documented key; the table its sections.
set(MOD ${PROJECT_SOURCE_DIR}/inputs/models)
add_test(NAME cli.simulate.json-keys
  COMMAND sh -c "\"$1\" simulate --scenario \"$2\" --model \"$3\" --batch 64 --json --candidates 100 | \"$4\" -c \"import json, sys; d = json.load(sys.stdin); missing = [k for k in ('iteration_s', 'pflops', 'compute_s', 'pipeline_comm_s', 'datap_comm_s', 'bubble_fraction', 'tokens_per_s', 'placement', 'schedule', 'micro_batches', 'stages') if k not in d]; assert not missing, missing; assert d['iteration_s'] > 0 and 0 <= d['bubble_fraction'] < 1 and d['micro_batches'] == 32, d\""
          _ ${GT} ${SCN}/tiny-2x2.toml ${MOD}/tiny.toml ${Python3_EXECUTABLE})
add_test(NAME cli.simulate.table
  COMMAND ${GT} simulate --scenario ${SCN}/world-wide.toml --model ${MOD}/gpt3-xl.toml --candidates 300)
set_tests_properties(cli.simulate.table PROPERTIES
  PASS_REGULAR_EXPRESSION "Stages.*One iteration.*bubble.*Throughput: [0-9.]+ PFLOPS")
add_test(NAME cli.simulate.megatron-random
  COMMAND ${GT} simulate --scenario ${SCN}/regional.toml --model ${MOD}/gpt3-xl.toml --system megatron --placement random --seed 2022)
set_tests_properties(cli.simulate.megatron-random PROPERTIES
  PASS_REGULAR_EXPRESSION "placement random.*schedule 1f1b.*blocking.*ring")
add_test(NAME cli.simulate.timeline
  COMMAND ${GT} simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --batch 4 --timeline --candidates 50)
set_tests_properties(cli.simulate.timeline PROPERTIES
  PASS_REGULAR_EXPRESSION "^replica,stage,device,step,start_s,end_s\n0,0,[0-9]+,F0,0,")
# The calibration documented in src/plan/README.md: DT-FM on the on-demand
# data centre (numbers as GB/s, the harness's vocabulary) gives the paper's 2.331 PFLOPS.
add_test(NAME cli.simulate.calibration
  COMMAND sh -c "\"$1\" simulate --scenario \"$2\" --model \"$3\" --vocabulary 30592 --bandwidth-scale 8 --json --candidates 500 | \"$4\" -c \"import json, sys; p = json.load(sys.stdin)['pflops']; assert abs(p - 2.331) < 0.01, p\""
          _ ${GT} ${SCN}/on-demand.toml ${MOD}/gpt3-xl.toml ${Python3_EXECUTABLE})
expect_input_error(simulate-bad-model "model-zero-layers\\.toml: model\\.layers: must be an integer >= 1"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${BAD}/model-zero-layers.toml)
expect_input_error(simulate-model-unknown-key "model-unknown-key\\.toml: device\\.peak_tflop: unknown key"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${BAD}/model-unknown-key.toml)
expect_input_error(simulate-missing-model "no-such-model\\.toml: cannot open"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${BAD}/no-such-model.toml)
expect_input_error(simulate-shape "tiny\\.toml.*1 layers, fewer than the 2 pipeline stages"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --layers 1)
expect_input_error(simulate-batch "tiny\\.toml.*global batch 7 is not a multiple"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --batch 7)
expect_input_error(simulate-no-model "command line.*--model" simulate --scenario ${SCN}/tiny-2x2.toml)
expect_input_error(simulate-bad-schedule "command line.*--schedule"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --schedule pipedream)
# Local steps: the data-parallel bytes crossing sites fall H-fold on the same placement.
add_test(NAME cli.simulate.local-steps
  COMMAND sh -c "for h in 0 50; do \"$1\" simulate --scenario \"$2\" --model \"$3\" --placement dtfm-rank-order --local-steps $h --json > \"$5/local-$h.json\" || exit 1; done; \"$4\" -c \"import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); assert b['local_steps']==50 and b['outer_wire']['format']=='fp32', b; assert abs(a['cross_site_datap_bytes']/b['cross_site_datap_bytes']-50)<1e-9, (a['cross_site_datap_bytes'], b['cross_site_datap_bytes']); assert b['iteration_s']<a['iteration_s'] and b['utilisation_mean']>a['utilisation_mean']\" \"$5/local-0.json\" \"$5/local-50.json\""
          _ ${GT} ${SCN}/world-wide.toml ${MOD}/gpt3-xl.toml ${Python3_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR})
# A synchronous start: its step is the same placement's synchronous one (a run without local steps, the
# per-step sum on the outer wire, as the runtime's compression.gradients), and the run's mean weighs the two.
add_test(NAME cli.simulate.synchronous-start
  COMMAND sh -c "g=\"$1\"; py=\"$4\"; d=\"$5\"; set -- --scenario \"$2\" --model \"$3\" --placement dtfm-rank-order; \"$g\" simulate \"$@\" --compress-gradients int4 --json > \"$d/sync.json\" && \"$g\" simulate \"$@\" --local-steps 20 --outer-wire int4 --json > \"$d/local.json\" && \"$g\" simulate \"$@\" --local-steps 20 --outer-wire int4 --synchronous-steps 100 --steps 1000 --json > \"$d/started.json\" || exit 1; \"$py\" -c \"import json,sys; s,l,b=(json.load(open(p)) for p in sys.argv[1:]); x=b['synchronous_start']; mean=(100*s['iteration_s']+900*l['iteration_s'])/1000; assert abs(x['synchronous_iteration_s']-s['iteration_s'])<1e-12 and abs(x['mean_iteration_s']-mean)<1e-9*mean, (x, s['iteration_s'], l['iteration_s']); assert abs(x['utilisation_mean']-l['utilisation_mean']*l['iteration_s']/mean)<1e-9 and s['iteration_s']>l['iteration_s'] and b['iteration_s']==l['iteration_s'], x\" \"$d/sync.json\" \"$d/local.json\" \"$d/started.json\""
          _ ${GT} ${SCN}/world-wide.toml ${MOD}/gpt3-xl.toml ${Python3_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR})
expect_input_error(simulate-synchronous-steps-without-local-steps "command line: --synchronous-steps: needs --local-steps"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --synchronous-steps 10 --steps 100)
expect_input_error(simulate-steps-not-beyond-synchronous "command line: --steps: .*more than --synchronous-steps 10, got 10"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --local-steps 5 --synchronous-steps 10 --steps 10)
expect_input_error(simulate-steps-alone "command line: --steps: needs --synchronous-steps"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --local-steps 5 --steps 10)
# Local steps: each bad value names its flag.
expect_input_error(simulate-negative-local-steps "command line.*--local-steps"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --local-steps -1)
expect_input_error(simulate-bad-outer-wire "command line.*--outer-wire.*int2"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --local-steps 10 --outer-wire int2)
expect_input_error(simulate-fragments-beyond-local-steps "command line.*--outer-fragments.*12 fragments are more than --local-steps 10"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --local-steps 10 --outer-fragments 12)
expect_input_error(plan-outer-wire-without-local-steps "command line.*--outer-wire.*needs --local-steps"
  plan --scenario ${SCN}/tiny-2x2.toml --outer-wire int8)
expect_input_error(simulate-within-site-without-local-steps "command line.*--outer-within-site.*needs --local-steps"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --outer-within-site)
expect_input_error(plan-within-site-without-sites "asymmetric-4\\.toml: --outer-within-site: the network names no sites"
  plan --scenario ${SCN}/asymmetric-4.toml --local-steps 10 --outer-within-site)
# Sites summing every step: the same placement's step is longer, its bytes between sites the same.
add_test(NAME cli.simulate.local-steps-within-site
  COMMAND sh -c "for w in '' --outer-within-site; do \"$1\" simulate --scenario \"$2\" --model \"$3\" --pp 1 --dp 4 --local-steps 10 $w --json > \"$5/within$w.json\" || exit 1; done; \"$4\" -c \"import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); assert b['local_step_s']>a['local_step_s'], (a['local_step_s'], b['local_step_s']); assert b['cross_site_datap_bytes']==a['cross_site_datap_bytes'] and b['outer_within_site'] and not a['outer_within_site']\" \"$5/within.json\" \"$5/within--outer-within-site.json\""
          _ ${GT} ${SCN}/tiny-2x2.toml ${MOD}/tiny.toml ${Python3_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR})

# Training from the command line: bad configuration -> exit 2 naming the key;
# device = cuda without a usable GPU -> exit 1 with what to do.
if(TARGET geotrain_runtime)
  expect_input_error(train-unknown-key "command line: train.stepz: unknown key" train --train.stepz=3)
  expect_input_error(train-bad-model "no-such-model\\.toml: cannot open file"
                     train --model.file=${BAD}/no-such-model.toml)
  expect_input_error(train-pipeline-without-mpirun "pipeline.stages: 2 stages need a multiple of 2 ranks: start geotrain under mpirun"
                     train --pipeline.stages=2)
  expect_input_error(train-bad-schedule "command line: pipeline.schedule: must be one of gpipe, 1f1b" train --pipeline.schedule=zb)
  expect_input_error(train-synchronous-steps-without-local-steps
                     "command line: outer.synchronous_steps: needs outer.local_steps >= 1" train --outer.synchronous_steps=10)
  expect_input_error(train-synchronous-steps-flushless
                     "command line: outer.synchronous_steps: cannot be combined with pipeline.flushless"
                     train --outer.local_steps=10 --outer.synchronous_steps=10 --pipeline.flushless=true)
  add_test(NAME cli.train.cuda-without-gpu
           COMMAND ${EXPECT} 1 "device = cuda: .*(without the CUDA backend|no usable GPU)" -- ${GT} train
                   --device.kind=cuda --train.steps=1 --optimizer.warmup_steps=0)
  set_tests_properties(cli.train.cuda-without-gpu PROPERTIES WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  add_test(NAME cli.train.quickstart-short
           COMMAND ${GT} train ${PROJECT_SOURCE_DIR}/inputs/quickstart.toml --train.steps=3
                   --train.eval_batches=2 --optimizer.warmup_steps=1 --device.kind=cpu --pipeline.stages=1
                   --checkpoint.dir=)
  set_tests_properties(cli.train.quickstart-short PROPERTIES
    PASS_REGULAR_EXPRESSION "step +3/3 \\| loss [0-9.]+ .*tok/s.*final validation loss [0-9.]+")
endif()

# geotrain probe under mpirun writes a scenario file that geotrain plan reads.
if(TARGET geotrain_mpi)
  add_test(NAME cli.probe.then-plan
    COMMAND sh -c "rm -f \"$4\" && \"$1\" -n 3 --oversubscribe --mca btl self,vader,tcp --mca pml ob1 --mca mpi_yield_when_idle 1 \"$2\" probe --out \"$4\" --bytes 262144 --deadline-s 30 && \"$2\" plan --scenario \"$4\" --pp 3 --dp 1 --candidates 50 --no-baselines"
            _ ${MPIEXEC_EXECUTABLE} ${GT} unused ${CMAKE_CURRENT_BINARY_DIR}/probed-3.toml)
  set_tests_properties(cli.probe.then-plan PROPERTIES
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" TIMEOUT 120 PROCESSORS 2
    PASS_REGULAR_EXPRESSION "probed 3 ranks.*wrote .*probed-3\\.toml.*Pipeline")
endif()

# A shell script run with $1 geotrain, $2 the four-site scenario, $3 GPT-2
# 124M's model file, $4 Python and $5 this build folder (for its outputs).
function(add_gpt2_four_sites_test name script)
  add_test(NAME ${name}
    COMMAND sh -c "${script}"
            _ ${GT} ${SCN}/four-sites-16.toml ${PROJECT_SOURCE_DIR}/inputs/models/gpt2-124m.toml ${Python3_EXECUTABLE}
            ${CMAKE_CURRENT_BINARY_DIR})
endfunction()

# plan --model plans for that model: c_DP and c_PP by hand for GPT-2 124M
# (124,439,808 parameters; pp 4: / 4 stages x 4 bytes; 1024 x 1024 tokens
# / 4 replicas x 768 x 2 bytes), and simulate plans for the model it
# simulates (the same cost as plan --model, not the scenario's GPT3-XL).
add_gpt2_four_sites_test(cli.plan.model-file
  "\"$1\" plan --scenario \"$2\" --model \"$3\" --pp 4 --dp 4 --json --candidates 300 --no-baselines --seed 3 > \"$5/plan-gpt2.json\" && \"$1\" simulate --scenario \"$2\" --model \"$3\" --pp 4 --dp 4 --json --candidates 300 --seed 3 > \"$5/simulate-gpt2.json\" && \"$4\" -c \"import json,sys; p=json.load(open(sys.argv[1])); s=json.load(open(sys.argv[2])); assert p['c_dp_bytes']==124439808, p['c_dp_bytes']; assert p['c_pp_bytes']==402653184, p['c_pp_bytes']; assert abs(s['plan_cost_s']-p['cost_s'])<=1e-9*p['cost_s'], (s['plan_cost_s'], p['cost_s'])\" \"$5/plan-gpt2.json\" \"$5/simulate-gpt2.json\"")

# Compressed traffic: plan and simulate price the same encoded volumes (GPT-2
# 124M, pp 4: c_DP = 31,109,952 values, int8 groups of 64 -> 486,093 scales:
# 33,054,324 bytes; c_PP = 201,326,592 values -> 213,909,504 bytes forward,
# fp16 402,653,184 back), and simulate reports its utilisation and advice.
add_gpt2_four_sites_test(cli.simulate.compression
  "f='--compress-gradients int8 --compress-activations int8 --pp 4 --dp 4 --candidates 300 --seed 3 --json'; \"$1\" plan --scenario \"$2\" --model \"$3\" $f --no-baselines > \"$5/plan-int8.json\" && \"$1\" simulate --scenario \"$2\" --model \"$3\" $f > \"$5/simulate-int8.json\" && \"$4\" -c \"import json,sys; p=json.load(open(sys.argv[1])); s=json.load(open(sys.argv[2])); assert p['c_dp_bytes']==33054324, p['c_dp_bytes']; assert p['c_pp_bytes']==213909504, p['c_pp_bytes']; assert p['c_pp_gradient_bytes']==402653184, p['c_pp_gradient_bytes']; assert abs(s['plan_cost_s']-p['cost_s'])<=1e-9*p['cost_s']; assert s['compression']['gradients']['format']=='int8' and s['compression']['activation_gradients'] is None; assert 0 < s['utilisation_min'] <= s['utilisation_mean'] <= 1; r=s['recommendation']; assert r['micro_batches_per_flush'] in [c['micro_batches_per_flush'] for c in r['candidates']], r\" \"$5/plan-int8.json\" \"$5/simulate-int8.json\"")
add_test(NAME cli.simulate.tied-head
  COMMAND ${GT} simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --batch 16 --lm-head on --candidates 50)
set_tests_properties(cli.simulate.tied-head PROPERTIES
  PASS_REGULAR_EXPRESSION "LM head on \\(tied.*tied embedding +[0-9.]+.*utilisation +[0-9.]+% +mean.*Recommendation: [0-9]+ micro-batches per flush")
add_test(NAME cli.simulate.untied-head
  COMMAND sh -c "\"$1\" simulate --scenario \"$2\" --model \"$3\" --batch 16 --untied-head --json --candidates 50 | \"$4\" -c \"import json, sys; d = json.load(sys.stdin); assert d['lm_head'] and not d['tied_head'] and d['tied_exchange_s'] == 0, d\""
          _ ${GT} ${SCN}/tiny-2x2.toml ${MOD}/tiny.toml ${Python3_EXECUTABLE})
expect_input_error(simulate-untied-without-head "untied-head needs the LM head"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --lm-head off --untied-head)
expect_input_error(simulate-bad-compression "command line.*--compress-activations"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --compress-activations topk)

if(TARGET geotrain_runtime)
  add_test(NAME cli.train.resume-limits
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/check_resume_limits.sh ${GT} ${EXPECT} ${PROJECT_SOURCE_DIR})
endif()

# geotrain convert (Hugging Face GPT-2 <-> checkpoint) and checkpoint.init_from
# against an independent PyTorch GPT-2 (e2e/hf_gpt2_reference.py); the mpi
# case is registered with the other mpirun tests (tests/CMakeLists.txt).
if(TARGET geotrain_runtime)
  foreach(case loss round-trip fine-tune bad-inputs)
    add_test(NAME cli.convert.${case}
             COMMAND ${GEOTRAIN_ANALYSIS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/check_hf_convert.py ${case} ${GT}
                     ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/convert-tests/${case})
    set_tests_properties(cli.convert.${case} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 300)
  endforeach()
endif()

# A byte flipped in any tensor of a checkpoint (single file or sharded folder)
# stops eval, sample, resume, init_from and convert naming file and tensor.
if(TARGET geotrain_runtime)
  add_test(NAME cli.checkpoint.checksums
           COMMAND ${GEOTRAIN_ANALYSIS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/check_checksums.py ${GT}
                   ${PROJECT_SOURCE_DIR}/inputs/quickstart.toml ${CMAKE_CURRENT_BINARY_DIR}/checksum-tests)
  set_tests_properties(cli.checkpoint.checksums PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 300)
endif()

# eval takes the model, data and batches from the checkpoint: a copied
# checkpoint of a non-default shape evaluated elsewhere with no model flags.
if(TARGET geotrain_runtime)
  # With MPI: the same eval as a 2-stage pipeline under mpirun.
  set(eval_mpirun "")
  if(TARGET geotrain_job)
    set(eval_mpirun -- ${MPIEXEC_EXECUTABLE} --oversubscribe --mca btl self,vader,tcp --mca pml ob1
        --mca mpi_yield_when_idle 1)
  endif()
  add_test(NAME cli.eval.from-checkpoint
           COMMAND ${GEOTRAIN_ANALYSIS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/check_eval_from_checkpoint.py ${GT}
                   ${PROJECT_SOURCE_DIR}/inputs/quickstart.toml ${CMAKE_CURRENT_BINARY_DIR}/eval-from-checkpoint
                   ${eval_mpirun})
  set_tests_properties(cli.eval.from-checkpoint PROPERTIES
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1"
                       TIMEOUT 300 PROCESSORS 2)
endif()

# plan --out / --rankfile / --hostfile / --slurm-hostfile from a probed matrix's host names.
add_test(NAME cli.plan.launch-files
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/check_launch_files.sh ${GT} ${CMAKE_CURRENT_BINARY_DIR}/launch-files
          ${SCN}/asymmetric-4.toml)

# train.log_json (stdout: JSON lines only) and train.metrics_file, with the timing file's /validation.
add_test(NAME cli.train.metrics
  COMMAND ${GEOTRAIN_ANALYSIS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/check_metrics.py ${GT}
          ${PROJECT_SOURCE_DIR}/inputs/quickstart.toml ${CMAKE_CURRENT_BINARY_DIR}/metrics-test)
set_tests_properties(cli.train.metrics PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 300)

# geotrain sample and geotrain eval on a checkpoint trained by the fixture
# (tests/e2e/check_sample_eval.py): seeds, PyTorch's greedy text, eval = the
# run's validation losses; bad inputs exit 2 with one line.
if(TARGET geotrain_runtime)
  set(SAMPLE_EVAL_DIR ${CMAKE_CURRENT_BINARY_DIR}/sample-eval)
  set(SAMPLE_CKPT ${SAMPLE_EVAL_DIR}/single/ckpt/step_00000030.h5)
  foreach(case train sample-seeds sample-pytorch sample-bpe eval-single)
    add_test(NAME cli.sample-eval.${case}
             COMMAND ${GEOTRAIN_ANALYSIS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/check_sample_eval.py ${case} ${GT}
                     ${PROJECT_SOURCE_DIR}/inputs/quickstart.toml ${SAMPLE_EVAL_DIR})
    set_tests_properties(cli.sample-eval.${case} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 300
                         SKIP_RETURN_CODE 77)
    geotrain_fixture(cli.sample-eval.${case} ${case} train sample-eval-checkpoint)
  endforeach()
  expect_input_error(sample-missing-checkpoint "no-such-checkpoint\\.h5: cannot open file"
                     sample --checkpoint ${BAD}/no-such-checkpoint.h5)
  expect_input_error(sample-tokens "command line: --tokens: must be >= 1, got 0" sample --checkpoint ${SAMPLE_CKPT} --tokens 0)
  expect_input_error(sample-temperature "command line: --temperature: must be a finite number >= 0"
                     sample --checkpoint ${SAMPLE_CKPT} --temperature=-0.5)
  expect_input_error(sample-top-k "command line: --top-k: must be >= 0" sample --checkpoint ${SAMPLE_CKPT} --top-k=-1)
  add_test(NAME cli.bad.sample-empty-prompt
           COMMAND ${EXPECT} 2 "command line: --prompt: encodes to no tokens" --
                   sh -c "\"$0\" sample --checkpoint \"$1\" --prompt ''" ${GT} ${SAMPLE_CKPT})
  expect_input_error(sample-prompt-outside-vocabulary
                     "command line: --prompt: token 1 of the prompt is id 195, outside the model's vocabulary of 128"
                     sample --checkpoint ${SAMPLE_EVAL_DIR}/vocab128/ckpt/step_00000002.h5 --prompt "aé")
  expect_input_error(sample-not-a-checkpoint "quickstart\\.toml: not an HDF5 file"
                     sample --checkpoint ${PROJECT_SOURCE_DIR}/inputs/quickstart.toml)
  expect_input_error(eval-missing-checkpoint "no-such-checkpoint\\.h5: cannot open file"
                     eval --checkpoint.resume=${BAD}/no-such-checkpoint.h5)
  expect_input_error(eval-other-model
                     "command line: model\\.layers: 2 contradicts the checkpoint's 4 \\(.*step_00000030\\.h5: attribute model_layers\\)"
                     eval --model.layers=2 --checkpoint.resume=${SAMPLE_CKPT})
  expect_input_error(eval-unknown-key "command line: train.eval_batchez: unknown key" eval --train.eval_batchez=3)
  expect_input_error(train-short-default-warmup
                     "optimizer\\.warmup_steps: is 20 \\(the default\\), larger than train\\.steps \\(5\\): set it to at most 5"
                     train --train.steps=5)
  expect_input_error(train-sample-temperature "command line: train.sample_temperature: must be in \\[0"
                     train --train.sample_temperature=-1)
  expect_input_error(train-sample-empty-prompt "command line: train.sample_prompt: encodes to no tokens"
                     train --train.sample_every_steps=5 --train.sample_prompt= --train.steps=1
                     --optimizer.warmup_steps=0)
  foreach(case sample-tokens sample-temperature sample-top-k sample-empty-prompt sample-prompt-outside-vocabulary
               eval-other-model)
    set_tests_properties(cli.bad.${case} PROPERTIES FIXTURES_REQUIRED sample-eval-checkpoint)
  endforeach()
  foreach(case eval-missing-checkpoint eval-unknown-key eval-other-model train-sample-empty-prompt)
    set_tests_properties(cli.bad.${case} PROPERTIES WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  endforeach()
endif()
# --system geotrain: the runtime's own exchange (network.dp_exchange = auto: direct or hierarchical per group, 25 MiB buckets from
# the last backward, 1F1B over one flush, tied head). On GPT-2 124M over the
# four-site network the buckets start early and the step is no longer than
# the same run with the sum after the backward.
add_gpt2_four_sites_test(cli.simulate.geotrain-system
  "f='--pp 4 --dp 4 --batch 64 --candidates 200 --seed 3 --json --system geotrain'; \"$1\" simulate --scenario \"$2\" --model \"$3\" $f > \"$5/geotrain-buckets.json\" && \"$1\" simulate --scenario \"$2\" --model \"$3\" $f --gradient-bucket-mb 0 > \"$5/geotrain-after.json\" && \"$4\" -c \"import json,sys; b=json.load(open(sys.argv[1])); a=json.load(open(sys.argv[2])); assert b['gradient_bucket_mb']==25 and a['gradient_bucket_mb']==0, (b['gradient_bucket_mb'], a['gradient_bucket_mb']); assert b['dp_scheme']=='auto' and b['schedule']=='1f1b' and b['lm_head'], b; assert b['iteration_s'] < a['iteration_s'], (b['iteration_s'], a['iteration_s'])\" \"$5/geotrain-buckets.json\" \"$5/geotrain-after.json\"")

# simulate --flushless: the JSON says so and has no flush to recommend; too
# few micro-batches for the stream's lead exits 2 naming the flag.
add_test(NAME cli.simulate.flushless
  COMMAND sh -c "\"$1\" simulate --scenario \"$2\" --model \"$3\" --batch 16 --flushless --flushless-ahead 1 --json --candidates 50 | \"$4\" -c \"import json, sys; d = json.load(sys.stdin); assert d['flushless'] and d['flushless_ahead'] == 1 and d['schedule'] == '1f1b' and 'recommendation' not in d and d['iteration_s'] > 0, d\""
          _ ${GT} ${SCN}/tiny-2x2.toml ${MOD}/tiny.toml ${Python3_EXECUTABLE})
# --timeline with --flushless: the unbroken stream of 4 steps, every device
# running each of the 4 x 8 micro-batches (16 sequences / 2 replicas) forward
# and backward once.
add_test(NAME cli.simulate.flushless-timeline
  COMMAND sh -c "\"$1\" simulate --scenario \"$2\" --model \"$3\" --batch 16 --flushless --timeline --candidates 50 | \"$4\" -c \"import collections, csv, sys; rows = [r for r in csv.DictReader(sys.stdin) if r['step'][0] in 'FB']; seen = collections.Counter((r['replica'], r['stage'], r['step']) for r in rows); expected = {(str(r), str(s), k + str(i)) for r in range(2) for s in range(2) for k in 'FB' for i in range(32)}; assert set(seen) == expected and set(seen.values()) == {1}, sorted(set(seen) ^ expected)[:5]\""
          _ ${GT} ${SCN}/tiny-2x2.toml ${MOD}/tiny.toml ${Python3_EXECUTABLE})
# --compress-tied-embedding: tiny's wte is 256 x 128 = 32,768 values; int8 in groups of 64 is
# 32,768 codes + 512 fp32 scales = 34,816 bytes (fp32: 131,072).
add_test(NAME cli.simulate.tied-embedding-wire
  COMMAND sh -c "f='--batch 16 --pp 2 --dp 2 --candidates 50 --system geotrain --json'; \"$1\" simulate --scenario \"$2\" --model \"$3\" $f > \"$5/tied-fp32.json\" && \"$1\" simulate --scenario \"$2\" --model \"$3\" $f --compress-tied-embedding int8 > \"$5/tied-int8.json\" && \"$4\" -c \"import json, sys; a, b = (json.load(open(p)) for p in sys.argv[1:]); assert a['tied_embedding_bytes'] == 131072 and b['tied_embedding_bytes'] == 34816, (a['tied_embedding_bytes'], b['tied_embedding_bytes']); assert b['compression']['tied_embedding']['format'] == 'int8' and a['compression']['tied_embedding'] is None; assert 0 < b['tied_exchange_s'] < a['tied_exchange_s']\" \"$5/tied-fp32.json\" \"$5/tied-int8.json\""
          _ ${GT} ${SCN}/tiny-2x2.toml ${MOD}/tiny.toml ${Python3_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR})
expect_input_error(simulate-flushless-too-few "--flushless: needs at least \\(1 \\+ ahead\\) x \\(pp - 1\\) \\+ 1 = 3 micro-batches per replica, got 2"
  simulate --scenario ${SCN}/tiny-2x2.toml --model ${MOD}/tiny.toml --batch 4 --flushless --flushless-ahead 1)
