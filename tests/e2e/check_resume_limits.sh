#!/usr/bin/env bash
# check_resume_limits.sh GEOTRAIN EXPECT_FAILURE SOURCE_DIR
# Resuming a checkpoint that has trained as many steps as asked is bad input
# naming train.steps (not a run that trains nothing and exits 0), and a
# longer run says that its learning-rate schedule changes length.
set -euo pipefail
geotrain=$1 expect=$2 source_dir=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--model.file="$source_dir/inputs/models/tiny.toml" --data.train="$source_dir/inputs/data/corpus_train.bin"
        --data.validation="$source_dir/inputs/data/corpus_val.bin" --train.micro_batch_sequences=2
        --model.sequence_length=32 --model.layers=1 --train.eval_batches=1 --optimizer.warmup_steps=1
        --device.kind=cpu --timing.file= --checkpoint.dir="$dir/ckpt")
"$geotrain" train "${common[@]}" --train.steps=4 >"$dir/first.txt"
bash "$expect" 2 "command line: train\.steps: is 3 but .*step_00000004\.h5 has already trained 4 steps: nothing left to train" \
  -- "$geotrain" train "${common[@]}" --train.steps=3 --checkpoint.resume=auto
"$geotrain" train "${common[@]}" --train.steps=6 --checkpoint.resume=auto >"$dir/longer.txt"
grep -q "resumed from .*step_00000004.h5 after step 4" "$dir/longer.txt" || { cat "$dir/longer.txt"; exit 1; }
grep -q "note: the learning-rate schedule decayed over 4 steps in the checkpoint's run and now over 6" "$dir/longer.txt" \
  || { echo "no schedule note"; cat "$dir/longer.txt"; exit 1; }
grep -q "step     6/6" "$dir/longer.txt" || { cat "$dir/longer.txt"; exit 1; }
echo "ok: resume limits"
