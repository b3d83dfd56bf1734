"""Peak memory and time of chunked vs naive per-token log-probs, each in a fresh process.

Peak resident memory is the child's `VmHWM` (the high-water mark of its own address space,
reset once the model and inputs are built where the kernel allows it), minus the resident
size at that moment, so what is compared is the memory the log-prob computation itself
adds. Not `ru_maxrss`: Linux carries that across `fork` and `execve`, so a child of a large
process would report its parent's size. A fresh process per measurement keeps one run's
freed memory from hiding the next one's peak.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

_CHILD = r"""
import json, sys, time
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from ftis_swarm.core.logprobs import token_logprobs
a = json.loads(sys.argv[1])
torch.manual_seed(0)
torch.set_num_threads(a["threads"])
cfg = Qwen2Config(vocab_size=a["vocab"], hidden_size=a["hidden"], intermediate_size=2 * a["hidden"],
                  num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=a["seq"], tie_word_embeddings=True)
model = Qwen2ForCausalLM(cfg)
ids = torch.randint(0, a["vocab"], (a["batch"], a["seq"]))
def status_kib(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key + ":"))
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size
except OSError:
    pass
base = status_kib("VmRSS")
t0 = time.perf_counter()
with torch.set_grad_enabled(a["grad"]):
    if a["naive"]:
        logits = model(ids).logits.float()
        out = torch.log_softmax(logits, -1)[:, :-1].gather(2, ids[:, 1:, None]).squeeze(2)
    else:
        out = token_logprobs(model, ids, chunk_size=a["chunk"])
    if a["grad"]:
        out.sum().backward()
seconds = time.perf_counter() - t0
peak = status_kib("VmHWM")
print(json.dumps({"peak_bytes": (peak - base) * 1024, "seconds": seconds, "checksum": float(out.sum())}))
"""


@dataclass(frozen=True)
class LogprobRun:
    peak_bytes: int
    seconds: float
    checksum: float


def measure_logprobs(*, naive: bool, vocab: int = 151_936, batch: int = 8, seq: int = 512, hidden: int = 64,
                     chunk: int = 512, grad: bool = True, threads: int = 2) -> LogprobRun:
    """Runs one log-prob computation (forward, plus backward when `grad`) in a fresh process."""
    args = dict(naive=naive, vocab=vocab, batch=batch, seq=seq, hidden=hidden, chunk=chunk, grad=grad,
                threads=threads)
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"log-prob measurement failed: {proc.stderr.strip().splitlines()[-1:]}")
    return LogprobRun(**json.loads(proc.stdout.strip().splitlines()[-1]))
