"""A transformers backend in a process of its own, sampling from weights in shared memory.

Generation ahead of learning (node/pipeline.py) on CPU runs the sampler beside the
learner. In one process the two contend for the GIL: the transformers decode loop at these
sizes spends most of a step in Python, and each side slowed the other by 10 to 20%
(docs/benchmarks.md, bench pipeline). Here the sampler runs in a child process with its own
torch threads, so only the cores and memory are shared.

The weights are not copied to the child: the parent moves its model copy into shared
memory (`share_memory`) and hands it over when the process starts (spawn; torch's pickler
passes the storages' handles), so both processes map the same pages. The parent refreshes
them in place (`rollout.weight_sync.InMemorySync`) between generations, which the child
then samples from; the caller must not refresh during a `generate` call (the pipeline syncs
only once a generation has returned).

The child seeds each call exactly as the in-process backend would: the parent keeps the
count of generate calls and the policy version, sends them with each request, and takes the
count the child reached back (a refused prompt raises before a seed is drawn). A refused
prompt (`RolloutInputError`) and any other error in the child are raised again here; a child
that died is a `RuntimeError` with its exit code, never a hang. The child ignores SIGINT and
SIGTERM (the node finishes its round and closes it) and exits when the parent's end of the
pipe closes, so a SIGKILLed node leaves no generator behind.
"""

from __future__ import annotations

import logging
import signal
from typing import Any, Optional, Sequence

import torch
import torch.multiprocessing as mp

from ftis_swarm.config import SamplingConfig
from ftis_swarm.rollout.base import GroupHeader, PromptRequest, RolloutBackend
from ftis_swarm.wire import Group, tokenizer_fingerprint

log = logging.getLogger(__name__)

POLL_S = 0.5
"""How often a wait for the child checks that it is still alive."""


class GeneratorProcessError(RuntimeError):
    """The generator's process exited or could not start."""


def _serve(conn: Any, model: torch.nn.Module, tokenizer: Any, header: GroupHeader, threads: int,
           options: dict[str, Any]) -> None:
    """The child: answers ("info",), ("generate", ...), ("greedy", ...) until ("close",) or the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent's signals end its round; the parent then closes us
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(threads)
    from ftis_swarm.rollout.hf_backend import TransformersBackend

    backend = TransformersBackend(model=model, tokenizer=tokenizer, header=header, **options)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        op, args = request[0], request[1:]
        if op == "close":
            conn.send(("ok", None, backend.generate_calls))
            return
        try:
            if op == "info":
                result: Any = (backend.context_len, backend.vocab_size)
            elif op == "generate":
                prompts, G, sampling, calls, version = args
                backend.restore_generate_calls(calls)
                while backend.policy_version < version:
                    backend.bump_policy_version()
                result = backend.generate(prompts, G, sampling)
            elif op == "greedy":
                result = backend.greedy(*args)
            else:
                raise ValueError(f"unknown request {op!r}")
            reply = ("ok", result, backend.generate_calls)
        except Exception as exc:  # noqa: BLE001 - raised again in the parent
            reply = ("error", exc, backend.generate_calls)
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - an exception that does not pickle
            conn.send(("error", RuntimeError(f"{type(reply[1]).__name__}: {reply[1]} ({exc})"),
                       backend.generate_calls))


class ProcessBackend(RolloutBackend):
    """Samples with `model` (moved into shared memory) in a child process with `threads` torch threads."""

    def __init__(self, *, model: torch.nn.Module, tokenizer: Any, header: GroupHeader, threads: int = 1,
                 **options: Any) -> None:
        super().__init__(header=header, tokenizer_fp=tokenizer_fingerprint(tokenizer))
        if next(model.parameters()).device.type != "cpu":
            raise ValueError("the generator process shares CPU memory; a model on a GPU samples in a thread")
        model.share_memory()
        ctx = mp.get_context("spawn")  # fork would copy the parent's threads (hivemind's, torch's) into a broken child
        self._conn, child_end = ctx.Pipe()
        self._proc: Optional[Any] = ctx.Process(target=_serve, name="ftis-generator", daemon=True,
                                                args=(child_end, model, tokenizer, header, threads, options))
        self._proc.start()
        child_end.close()
        self._context_len, self._vocab_size = self._call("info")
        log.info("generator process %d started: %d torch threads, weights in shared memory", self._proc.pid, threads)

    @property
    def pid(self) -> Optional[int]:
        """The generator process's id (None once closed)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def context_len(self) -> int:
        return self._context_len

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def generate(self, prompts: Sequence[PromptRequest], G: int, sampling: SamplingConfig) -> list[Group]:
        return self._call("generate", list(prompts), G, sampling, self.generate_calls, self.policy_version)

    def greedy(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        return self._call("greedy", [list(p) for p in prompts], max_new_tokens)

    def load_weights(self, path: str) -> None:
        raise NotImplementedError("the generator process samples from shared weights: refresh them in place "
                                  "(rollout.weight_sync.InMemorySync) and bump the policy version")

    def set_adapter(self, path: str) -> None:
        self.load_weights(path)

    def close(self) -> None:
        """Stops the child (waits up to 10 s, then terminates it); idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.is_alive():
                self._conn.send(("close",))
                if self._conn.poll(10):
                    self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            pass
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
        self._conn.close()

    def _call(self, op: str, *args: Any) -> Any:
        proc = self._proc
        if proc is None:
            raise GeneratorProcessError("the generator process was closed")
        try:
            self._conn.send((op, *args))
            while not self._conn.poll(POLL_S):
                if not proc.is_alive():
                    raise EOFError
            status, result, calls = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            proc.join(1)
            raise GeneratorProcessError(
                f"the generator process {proc.pid} exited (status {proc.exitcode}) during {op}") from None
        self.restore_generate_calls(calls)
        if status == "error":
            raise result
        return result
