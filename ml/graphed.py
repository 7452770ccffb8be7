"""A training step's forward, loss, backward and gradient clipping captured as a CUDA graph.

A step of the tabular network at a batch of about a thousand rows is many small kernels and
little GPU work: launched one by one from Python, the GPU waits on the host. Captured
once and replayed, a step is one launch. ``GraphedStep`` keeps one graph per batch shape (the
epoch's last, shorter batch gets its own), warms each shape up with a few eager steps on a side
stream before capturing it, and copies every batch into the graph's static input buffers. The
optimizer's update stays outside the graph (one fused kernel on CUDA), so Lightning's manual
optimisation counts the step as usual.

Where a graph cannot be used (no CUDA device, or its capture failed) the step runs eagerly: the
same forward, backward and clipping, said once in the log with the reason.

Python's cyclic garbage collector is off during a capture. A collection there can free an
earlier fit's graphs (a tuning process fits many models), and destroying a graph while a stream
captures is forbidden: it fails the capture. PyTorch no longer collects before a capture.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor, nn

log = logging.getLogger(__name__)

# Eager steps of a batch shape before its capture: the cuBLAS workspaces, autograd's per-stream
# state and the optimizer's state must all exist before a capture, which may not allocate them.
WARMUP_STEPS = 3
# One graph for the full batch and one for the epoch's remainder; any other shape runs eagerly.
MAX_GRAPHS = 2

Batch = Sequence[Tensor]
LossFn = Callable[[Batch], Tensor]


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    inputs: list[Tensor]
    loss: Tensor
    grads: list[Tensor | None]


class GraphedStep:
    """Computes a step's loss and leaves clipped gradients on ``params``: replayed or eager.

    ``loss_fn(batch)`` is the forward and the loss. ``clip`` is the maximum gradient norm
    (None: no clipping), as Lightning's ``gradient_clip_val`` with the "norm" algorithm.
    """

    def __init__(
        self,
        loss_fn: LossFn,
        params: Sequence[nn.Parameter],
        clip: float | None = None,
    ):
        self.loss_fn, self.params, self.clip = loss_fn, list(params), clip
        self.graphs: dict[tuple[tuple[int, ...], ...], _Graph] = {}
        self.warmups: dict[tuple[tuple[int, ...], ...], int] = {}
        self.eager_reason: str | None = None
        # The graph whose gradient buffers the parameters' .grad hold now (None: eager ones).
        self._grads_of: _Graph | None = None
        self.replays = 0
        self.eager_steps = 0
        # One side stream for every warm-up and capture: cuBLAS keeps a workspace per stream,
        # which must exist before a capture on that stream (PyTorch's make_graphed_callables
        # warms up and captures on one stream for the same reason).
        self._stream: torch.cuda.Stream | None = None

    def __call__(self, batch: Batch) -> Tensor:
        """The batch's loss, with gradients computed and clipped; the optimizer steps after."""
        key = tuple(tuple(t.shape) for t in batch)
        graph = self.graphs.get(key)
        if graph is None and self._can_capture(batch):
            if self.warmups.get(key, 0) < WARMUP_STEPS:
                self.warmups[key] = self.warmups.get(key, 0) + 1
                return self._eager(batch, side_stream=True)
            graph = self._capture(batch, key)
        if graph is None:
            return self._eager(batch)
        for static, value in zip(graph.inputs, batch, strict=True):
            if static.data_ptr() != value.data_ptr():
                static.copy_(value)
        graph.graph.replay()
        if self._grads_of is not graph:
            for param, grad in zip(self.params, graph.grads, strict=True):
                param.grad = grad
            self._grads_of = graph
        self.replays += 1
        return graph.loss

    def _on_cuda(self, batch: Batch) -> bool:
        return all(t.is_cuda for t in (*batch, *self.params))

    def _can_capture(self, batch: Batch) -> bool:
        if self.eager_reason is None and not self._on_cuda(batch):
            self._give_up("CUDA graphs need the batch and the parameters on a CUDA device")
        if self.eager_reason is None and len(self.graphs) >= MAX_GRAPHS:
            # Not a failure: a third batch shape in one fit is unusual; it simply runs eagerly.
            return False
        return self.eager_reason is None

    def _give_up(self, reason: str, error: Exception | None = None) -> None:
        self.eager_reason = reason
        # A failed capture's traceback goes with the warning: it says what to mend.
        log.warning("training step runs eagerly: %s", reason, exc_info=error)

    def _side_stream(self) -> torch.cuda.Stream:
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        return self._stream

    def _eager(self, batch: Batch, side_stream: bool = False) -> Tensor:
        stream = self._side_stream() if side_stream else None
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            for param in self.params:
                param.grad = None
            loss = self.loss_fn(batch)
            loss.backward()
            self._clip()
        if stream is not None:
            torch.cuda.current_stream().wait_stream(stream)
        self._grads_of = None
        self.eager_steps += 1
        return loss.detach()

    def _clip(self) -> None:
        if self.clip is not None:
            grads = [p for p in self.params if p.grad is not None]
            # On CUDA: foreach kernels and no host synchronisation, so it can be captured.
            nn.utils.clip_grad_norm_(grads, self.clip)

    def _capture(self, batch: Batch, key: tuple[tuple[int, ...], ...]) -> _Graph | None:
        inputs = [t.clone() for t in batch]
        # The backward inside the capture allocates the gradients from the graph's pool; each
        # replay overwrites them, so they are never zeroed.
        for param in self.params:
            param.grad = None
        # A capture that fails as it ends leaves its stream current (torch.cuda.graph ends the
        # capture before it restores the stream): the eager steps after it go back to this one.
        caller = torch.cuda.current_stream() if torch.cuda.is_available() else None
        collecting = gc.isenabled()
        gc.disable()
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self._side_stream()), _autocast_without_cache():
                loss = self.loss_fn(inputs)
                loss.backward()
                self._clip()
        except Exception as error:  # any capture failure: logged, and the step runs eagerly
            for param in self.params:
                param.grad = None
            # Every step of this fit runs eagerly from now on, the shapes captured before too.
            self.graphs.clear()
            if caller is not None:
                torch.cuda.set_stream(caller)
            _leave_rng_capture()
            self._give_up(f"capture failed ({type(error).__name__}: {error})", error)
            return None
        finally:
            if collecting:
                gc.enable()
        captured = _Graph(graph, inputs, loss.detach(), [p.grad for p in self.params])
        self.graphs[key] = captured
        log.info("training step captured as a CUDA graph for batch shapes %s", key)
        return captured


def _leave_rng_capture() -> None:
    """Take the CUDA generators out of capture mode, where a failed capture leaves them.

    A capture that fails ends before PyTorch resets the generators' capture flag, and every
    random op after it (dropout in an eager step) then fails. Each default generator gets a fresh
    state with the same seed and offset. Graphs captured before keep the old state, so none of
    them may replay afterwards: the step drops its own, and an earlier fit's are not replayed.
    """
    for generator in torch.cuda.default_generators:
        generator.graphsafe_set_state(generator.clone_state())


def _autocast_without_cache() -> AbstractContextManager[object]:
    """The caller's autocast, with its weight-cast cache off: a capture may not keep casts
    made outside it (PyTorch's CUDA graphs notes). A no-op where autocast is off."""
    if not torch.is_autocast_enabled("cuda"):
        return nullcontext()
    return torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)
