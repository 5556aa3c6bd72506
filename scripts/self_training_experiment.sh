#!/usr/bin/env bash
# The verified self-training experiment (issue 27): from the shipped adapter cuset-ew-135m, rounds of
# `cuset improve` on the first POOL problems of the committed elementwise pool, tier cpu; then the
# start model and the last round's model evaluated side by side on the demo's elementwise problems the
# adapter never trained on. Resumable: run it again and every finished stage is skipped. Heavy work
# runs at nice 19. Results go to experiments/self_training/ (small files only; adapters stay in runs/).
set -euo pipefail
cd "$(dirname "$0")/.."
POOL=${POOL:-24}
ROUNDS=${ROUNDS:-2}
SAMPLES=${SAMPLES:-2}
MAX_TOKENS=${MAX_TOKENS:-384}
OUT=runs/self-training
RESULTS=experiments/self_training
UNSEEN=01_vector_add,04_scale_bias,07_leaky_relu,09_multiply_add,10_softplus,11_elu
mkdir -p "$OUT" "$RESULTS"
cuset=(nice -n 19 .venv/bin/cuset)

"${cuset[@]}" data pool --count "$POOL" --out "$OUT/pool.jsonl"
"${cuset[@]}" improve --model cuset-ew-135m --problems "$OUT/pool.jsonl" --out "$OUT/improve" \
    --rounds "$ROUNDS" --samples "$SAMPLES" --max-kept 2 --tier cpu --method cuset --max-steps 30 \
    --max-tokens "$MAX_TOKENS" --eval-problems demo --prompt-style compact
cp "$OUT/improve/report.json" "$RESULTS/report.json"
cp "$OUT/improve/kept.jsonl" "$RESULTS/kept.jsonl"

tuned=$(.venv/bin/python -c 'import json,sys; r=json.load(open(sys.argv[1]))["rounds"]; print(r[-1]["tuned_model"] or "cuset-ew-135m")' "$OUT/improve/report.json")
for pair in "before:cuset-ew-135m" "after:$tuned"; do
    name=${pair%%:*} model=${pair#*:}
    if [ ! -f "$RESULTS/eval_$name/results.json" ]; then
        "${cuset[@]}" eval --model "$model" --problems demo --problem-ids "$UNSEEN" --samples 4 --temperature 0.7 \
            --max-new-tokens "$MAX_TOKENS" --prompt-style compact --tier cpu --out "$RESULTS/eval_$name" --quiet
    fi
done
echo "self-training experiment: done; see $RESULTS"
