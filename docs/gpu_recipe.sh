#!/usr/bin/env bash
# The paper's setting on one machine with two GPUs: Qwen2.5-3B and Qwen2.5-1.5B, GSM8K train,
# G = 12, 24 prompts per step, lr 1e-6, C = 2, g = 50 (the defaults), 2 nodes, 50 iterations,
# then MATH-500 greedy pass@1 of each node's last checkpoint. docs/experiment.md has the
# expected run time and how it was estimated.
#
#   bash docs/gpu_recipe.sh                      # swarm arm (both nodes together), mode ftis
#   ARM=solo bash docs/gpu_recipe.sh             # each node alone (the baseline)
#   MODE=nois RUN=runs/gpu-nois bash docs/gpu_recipe.sh
#   MODEL_A=Qwen2.5-Coder-3B MODEL_B=Qwen2.5-Coder-1.5B bash docs/gpu_recipe.sh   # the headline pair
#   LORA_A=16 bash docs/gpu_recipe.sh            # A trains a LoRA adapter (fits a 40-48 GB GPU)
#   DRY_RUN=1 bash docs/gpu_recipe.sh            # print the commands and validate the flags only
#
# Needs: `pip install -e '.[vllm]'` (deploy/setup.sh --gpu) and two CUDA GPUs; GSM8K and
# MATH-500 ship with the package (docs/tasks.md). A full fine-tune of the 3B model
# with AdamW needs an 80 GB GPU (fp32 master weights and moments, 48 GB, plus vLLM's copy).
set -euo pipefail

MODEL_A=${MODEL_A:-Qwen2.5-3B}
MODEL_B=${MODEL_B:-Qwen2.5-1.5B}
LORA_A=${LORA_A:-}
LORA_B=${LORA_B:-}
MODE=${MODE:-ftis}
ARM=${ARM:-swarm}                  # swarm | solo
RUN=${RUN:-runs/gpu-paper-$ARM-$MODE}
ROUNDS=${ROUNDS:-50}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-512}
EVAL_MAX_NEW_TOKENS=${EVAL_MAX_NEW_TOKENS:-1024}
EVAL_BATCH=${EVAL_BATCH:-32}
PORT=${PORT:-31337}
DRY_RUN=${DRY_RUN:-}

case "$ARM" in swarm|solo) ;; *) echo "error: ARM must be swarm or solo, not '$ARM'" >&2; exit 2 ;; esac
if [[ -z "$DRY_RUN" ]] && [[ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]]; then
    echo "error: this recipe needs two CUDA GPUs (nvidia-smi lists fewer)" >&2; exit 2
fi

exec 3>&2
run() {  # prints a command (to the terminal, fd 3), then runs it unless DRY_RUN is set
    echo "+ $*" >&3
    [[ -n "$DRY_RUN" ]] || "$@"
}

join_args() {  # join_args ARRAY MODEL LORA_RANK NAME SEED: fills ARRAY with one node's join flags
    local -n args=$1
    local model=$2 lora=$3 name=$4 seed=$5
    args=(--model "$model" --task gsm8k --backend vllm --dtype bf16
                --rounds "$ROUNDS" --prompts-per-round 24 --group-size 12 --lr 1e-6 --mode "$MODE"
                --max-new-tokens "$MAX_NEW_TOKENS" --temperature 1.0 --round-deadline 30
                --run-dir "$RUN/node-$name" --run-id "paper-$ARM-$MODE" --seed "$seed"
                --identity "$RUN/node-$name.key" --no-table)
    if [[ -n "$lora" ]]; then args+=(--lora-rank "$lora"); fi
    if [[ "$ARM" == swarm ]]; then args+=(--peers-file "$RUN/bootstrap.maddrs"); fi
}

mkdir -p "$RUN"
ARGS_A=(); ARGS_B=()
join_args ARGS_A "$MODEL_A" "$LORA_A" a 0
join_args ARGS_B "$MODEL_B" "$LORA_B" b 1
if [[ -n "$DRY_RUN" ]]; then  # every flag validated by the node's own config, nothing heavy imported
    ftis-node join "${ARGS_A[@]}" --print-config > "$RUN/config-a.json"
    ftis-node join "${ARGS_B[@]}" --print-config > "$RUN/config-b.json"
fi

pids=()
cleanup() { for p in "${pids[@]+"${pids[@]}"}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

if [[ "$ARM" == swarm ]]; then
    rm -f "$RUN/bootstrap.maddrs"
    run ftis-node bootstrap --host 127.0.0.1 --port "$PORT" --identity "$RUN/bootstrap.key" \
        --maddrs-file "$RUN/bootstrap.maddrs" > "$RUN/bootstrap.log" 2>&1 &
    pids+=($!)
    if [[ -z "$DRY_RUN" ]]; then
        for _ in $(seq 120); do [[ -s "$RUN/bootstrap.maddrs" ]] && break; sleep 1; done
        [[ -s "$RUN/bootstrap.maddrs" ]] || { echo "error: the bootstrap peer wrote no multiaddrs in 120 s" >&2; exit 1; }
    fi
fi

start=$(date +%s)
CUDA_VISIBLE_DEVICES=0 run ftis-node join "${ARGS_A[@]}" > "$RUN/node-a.log" 2>&1 &
node_a=$!
CUDA_VISIBLE_DEVICES=1 run ftis-node join "${ARGS_B[@]}" > "$RUN/node-b.log" 2>&1 &
node_b=$!
pids+=("$node_a" "$node_b")
wait "$node_a"
wait "$node_b"
echo "training: $(( $(date +%s) - start )) s" | tee "$RUN/train_seconds.txt"

last_ckpt() {  # the model/ or adapter/ folder of a node's last complete checkpoint
    local dir
    dir=$(ls -d "$RUN/node-$1"/checkpoints/ckpt-* 2>/dev/null | sort | tail -1)
    if [[ -z "$dir" ]]; then  # dry run: where it will be
        local kind=model lora=$LORA_A
        [[ $1 == b ]] && lora=$LORA_B
        [[ -n "$lora" ]] && kind=adapter
        echo "$RUN/node-$1/checkpoints/ckpt-$(printf %08d "$ROUNDS")/$kind"; return
    fi
    if [[ -d "$dir/adapter" ]]; then echo "$dir/adapter"; else echo "$dir/model"; fi
}

for name in a b; do
    base=$MODEL_A; [[ $name == b ]] && base=$MODEL_B
    gpu=0; [[ $name == b ]] && gpu=1
    [[ -f "$RUN/eval-$name-start.json" ]] ||
        CUDA_VISIBLE_DEVICES=$gpu run ftis-node eval --model "$base" --task math500 \
            --max-new-tokens "$EVAL_MAX_NEW_TOKENS" --batch-size "$EVAL_BATCH" --json "$RUN/eval-$name-start.json" &
    CUDA_VISIBLE_DEVICES=$gpu run ftis-node eval --model "$(last_ckpt $name)" --task math500 \
        --max-new-tokens "$EVAL_MAX_NEW_TOKENS" --batch-size "$EVAL_BATCH" --json "$RUN/eval-$name-end.json" &
done
wait
run ftis-node report "$RUN/node-a" "$RUN/node-b" --png "$RUN/report.png"
echo "total: $(( $(date +%s) - start )) s; MATH-500 results in $RUN/eval-*.json" >&2
