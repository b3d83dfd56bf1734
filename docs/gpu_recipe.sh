#!/usr/bin/env bash
# The paper's comparison on one GPU or two, through the experiment harness (`ftis-node experiment`):
# learner A Qwen2.5-3B, learner B Qwen2.5-1.5B (full fine-tunes, or LoRA by option), GSM8K train,
# G = 12, 24 prompts per learner per round, lr 1e-6, 50 rounds, seeds 0 1 2, and the arms
# solo, vertical-nois, vertical-tis, vertical-ftis and horizontal-ftis (mixed groups: the harness
# runs them on purpose, `ftis-node join` refuses them). A round is synchronous: both learners
# generate, their groups cross the real wire codec, both update. Held-out accuracy is MATH-500
# greedy pass@1, on the GPU, before training and after the last round.
#
#   bash docs/gpu_recipe.sh                  # every arm and seed (the GPUs come from nvidia-smi)
#   SHORT=1 bash docs/gpu_recipe.sh          # a first look: 10 rounds, solo and vertical-ftis, seed 0
#   LORA_A=64 LORA_B=64 bash docs/gpu_recipe.sh
#   MODEL_A=Qwen2.5-Coder-3B MODEL_B=Qwen2.5-Coder-1.5B bash docs/gpu_recipe.sh   # the headline pair
#   DRY_RUN=1 bash docs/gpu_recipe.sh        # check the memory plan, print the command and the time estimate
#
# Placement: learner i lives on GPU i mod (GPUs): one GPU holds both, two GPUs hold one each. Each
# learner samples with the transformers backend on its own weights (no second copy, no vLLM share).
# Memory (`ftis-node plan`, bf16 autocast, micro-batch 4, sequences of 700 tokens; docs/gpu.md):
#   3B full 70 GiB peak (57.5 with activation checkpointing), 1.5B full 37.5 GiB, LoRA r64 26.4 / 16.0.
#   One H200 (141 GiB): both full learners (A's 46 + B's 23 GiB resident, plus one step's 24 GiB).
#   One 80 GiB GPU: A as LoRA (LORA_A=64) with B full, or both LoRA. Two GPUs of 80 GiB: both full,
#   with activation checkpointing for A (the script turns it on below 100 GiB a GPU).
# Disk: the harness keeps no checkpoints (weights stay in memory for the final evaluation); each
#   run writes one JSON of a few hundred KB: the whole recipe stays under 100 MB.
# Peers' groups: the harness gives each learner all 24 of the other's groups a round (no per-peer
#   cap; a `join` node's `learner.max_groups_per_peer`, default 16, would have to be raised to 24).
#
# Time per run (one arm, one seed; both learners in one process, one after the other):
#   MEASURED on an H200 (GPU check runs 1 and 2, docs/benchmarks.md): the transformers sampler on
#   the 1.5B shape, 969-1,201 tokens/s at 32 rows (fp32, the harness samples with the fp32 model);
#   the bf16 learner update, 10,609-14,085 tokens/s (1.5B) and 7,384 tokens/s (3B shape).
#   ESTIMATED: the 3B sampler at half the 1.5B's rate; completions of 300 tokens on average
#   (GSM8K answers; budget 512); prompts of 150 tokens; the log-prob pass a third of an update;
#   MATH-500 greedy evaluation (500 x up to 1,024 tokens, 64 rows) 4 min (1.5B) and 8 min (3B).
#   A round: sampling 288 x 300 tokens, 72-89 s (1.5B) + 144-178 s (3B); updating on 576
#   sequences of 450 tokens, 25-33 s + 47 s: 290-350 s, so 50 rounds 4.0-4.9 h and a run
#   4.2-5.1 h with its evaluation. All 15 runs: 63-77 h on one GPU; with two H200s and WORKERS=2
#   (two runs at once) about half; SHORT=1 (2 runs of 10 rounds): 2-2.4 h. A rerun resumes:
#   every finished run is kept.
set -euo pipefail

MODEL_A=${MODEL_A:-Qwen2.5-3B}
MODEL_B=${MODEL_B:-Qwen2.5-1.5B}
LORA_A=${LORA_A:-0}
LORA_B=${LORA_B:-0}
OUT=${OUT:-runs/gpu-paper}
ROUNDS=${ROUNDS:-50}
ARMS=${ARMS:-solo,vertical-nois,vertical-tis,vertical-ftis,horizontal-ftis}
SEEDS=${SEEDS:-0,1,2}
EVAL_ITEMS=${EVAL_ITEMS:-500}
WORKERS=${WORKERS:-1}
DRY_RUN=${DRY_RUN:-}
if [[ -n "${SHORT:-}" ]]; then ROUNDS=10; ARMS=solo,vertical-ftis; SEEDS=0; fi

gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | awk '{print int($1/1024)}' || true)
if [[ -z "$DRY_RUN" && "${gpus:-0}" -lt 1 ]]; then
    echo "error: this recipe needs a CUDA GPU (nvidia-smi lists none); DRY_RUN=1 shows what it would run" >&2; exit 2
fi
gpus=${gpus:-0}; gib=${gib:-80}; [[ "$gpus" -ge 1 ]] || gpus=1
ac=--no-activation-checkpointing
[[ "$gib" -lt 100 ]] && ac=--activation-checkpointing

plan() {  # plan MODEL LORA: the node's own memory plan for one learner on one of these GPUs
    local lora=()
    [[ "$2" -gt 0 ]] && lora=(--lora-rank "$2")
    ftis-node plan --model "$1" "${lora[@]}" --nproc 1 --backend shared --micro-batch 4 --seq-len 700 \
        "$ac" --gpu-memory "$gib" | tail -1
}
echo "GPUs: $gpus of $gib GiB; learner A $MODEL_A (LoRA ${LORA_A}), B $MODEL_B (LoRA ${LORA_B})" >&2
echo "  A: $(plan "$MODEL_A" "$LORA_A")" >&2
echo "  B: $(plan "$MODEL_B" "$LORA_B")" >&2
[[ "$gpus" -eq 1 ]] && echo "  one GPU holds both: their resident weights and optimiser state add up (docs/gpu.md)" >&2

cmd=(ftis-node experiment --run-dir "$OUT" --figures "$OUT/figures"
     --model-a "$MODEL_A" --model-b "$MODEL_B" --lora-rank-a "$LORA_A" --lora-rank-b "$LORA_B"
     --lr-a 1e-6 --lr-b 1e-6 --task gsm8k --eval-task math500 --limit "$EVAL_ITEMS" --eval-samples 0
     --eval-max-new-tokens 1024 --rounds "$ROUNDS" --prompts-per-round 24 --group-size 12
     --temperature 1.0 --max-new-tokens 512 --dtype bf16 --micro-batch 4 "$ac"
     --arms "$ARMS" --seeds "$SEEDS" --workers "$WORKERS" --threads 4)
echo "+ ${cmd[*]}" >&2
[[ -n "$DRY_RUN" ]] || "${cmd[@]}"
