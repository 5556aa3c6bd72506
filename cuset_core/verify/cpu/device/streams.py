"""The order of the device process's work across CUDA streams, as late as a GPU may run it.

On a GPU, work on a stream other than the default one runs concurrently with everything else, so a
kernel that reads what another stream's kernel writes sees the new data only after a
synchronisation: ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, an event the reader waits on
(``cudaStreamWaitEvent``, ``cudaEventSynchronize``), or the legacy default stream's implicit rule.
The device process runs everything on one thread, in order, so a missing synchronisation would
never show. :class:`StreamOrder` defers the work submitted to other streams until something
synchronises them, so such a reader sees the old data, as it may on a GPU:

- stream 0 is the legacy default stream (``cudaStreamLegacy`` and ``cudaStreamPerThread`` map to
  it): its work runs at once, after every *blocking* stream's pending work (a stream created without
  ``cudaStreamNonBlocking``: the legacy stream waits for them, and they for it). *Non-blocking*
  streams are not ordered with it;
- work on another stream waits in that stream's queue (in order) until a synchronisation needs it;
  work that must run now (a device-to-host copy, torch's operators on their stream) first runs its
  stream's queue;
- when several queues run with nothing ordering them, the stream that submitted last runs first:
  a reader on another stream then runs before the writer it forgot to wait for;
- an event marks how far each stream had come when it was recorded; waiting on it runs that far.
  ``cudaStreamQuery``/``cudaEventQuery`` answer "not ready" while work is pending, and let it finish
  by the next query, so a polling loop ends and a single unchecked query does not synchronise.

Running pending work earlier than a GPU must is always allowed; running it later than a
synchronisation is never done, so correct multi-stream code gets its order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_STREAM = 0
NOT_READY = 600  # cudaErrorNotReady

Work = Callable[[], None]


@dataclass
class _Queue:
    nonblocking: bool
    pending: deque[tuple[int, Work]] = field(default_factory=deque)  # (submission number, work)


@dataclass
class StreamOrder:
    """Pending work by stream (a stream is the host's handle, an int; 0 the legacy default), event
    marks, and the queries asked once."""

    queues: dict[int, _Queue] = field(default_factory=dict)
    marks: dict[int, dict[int, int]] = field(default_factory=dict)  # event -> stream -> submission
    asked: set[tuple[str, int]] = field(default_factory=set)
    submitted: int = 0

    def submit(self, stream: int, nonblocking: bool, work: Work) -> None:
        """Work on ``stream``: now on the default stream (after the blocking streams), else queued."""
        if stream == DEFAULT_STREAM:
            self._run_blocking()
            work()
            return
        self.submitted += 1
        self._queue(stream, nonblocking).pending.append((self.submitted, work))

    def before(self, stream: int) -> None:
        """Run what must come before work on ``stream`` that cannot wait (it runs next, at once)."""
        if stream == DEFAULT_STREAM:
            self._run_blocking()
        else:
            self._run(stream)

    def synchronize(self, stream: int) -> None:
        """``cudaStreamSynchronize(stream)``: its work is done (the default stream's: the blocking streams')."""
        self.before(stream)

    def synchronize_device(self) -> None:
        """``cudaDeviceSynchronize``, ``cudaFree``, the end of a forward: every stream's work is done."""
        self._run_all(list(self.queues))

    def record(self, event: int, stream: int) -> None:
        """``cudaEventRecord(event, stream)``: the event completes after the work submitted so far to
        ``stream`` (to the default stream: also the blocking streams' work before it)."""
        streams = [s for s, q in self.queues.items() if not q.nonblocking] if stream == DEFAULT_STREAM else [stream]
        self.marks[event] = {s: self.submitted for s in streams if s in self.queues}
        self.asked.discard(("event", event))

    def wait(self, event: int) -> None:
        """``cudaStreamWaitEvent``/``cudaEventSynchronize``: the work before the event's record is done
        (at once: earlier than the waiting stream needs it, which a GPU may do too). An event never
        recorded is complete."""
        for stream, upto in self.marks.get(event, {}).items():
            self._run(stream, upto)

    def query(self, stream: int) -> int:
        """``cudaStreamQuery``: 0 when its work is done, else ``NOT_READY``, and done by the next query."""
        busy = self._busy(stream)
        return self._answer(("stream", stream), busy, lambda: self.synchronize(stream))

    def query_event(self, event: int) -> int:
        """``cudaEventQuery``: as :meth:`query`, for the work before the event's record."""
        busy = any(self._head(stream) <= upto for stream, upto in self.marks.get(event, {}).items())
        return self._answer(("event", event), busy, lambda: self.wait(event))

    def idle(self) -> bool:
        """Whether no work is pending on any stream."""
        return not any(queue.pending for queue in self.queues.values())

    # ------------------------------------------------------------ inside

    def _queue(self, stream: int, nonblocking: bool) -> _Queue:
        queue = self.queues.get(stream)
        if queue is None:
            queue = self.queues[stream] = _Queue(nonblocking)
        return queue

    def _head(self, stream: int) -> float:
        queue = self.queues.get(stream)
        return queue.pending[0][0] if queue and queue.pending else float("inf")

    def _busy(self, stream: int) -> bool:
        if stream == DEFAULT_STREAM:
            return any(q.pending and not q.nonblocking for q in self.queues.values())
        return self._head(stream) != float("inf")

    def _answer(self, key: tuple[str, int], busy: bool, finish: Callable[[], None]) -> int:
        if not busy:
            self.asked.discard(key)
            return 0
        if key in self.asked:
            self.asked.discard(key)
            finish()
            return 0
        self.asked.add(key)
        return NOT_READY

    def _run(self, stream: int, upto: float = float("inf")) -> None:
        queue = self.queues.get(stream)
        while queue and queue.pending and queue.pending[0][0] <= upto:
            _, work = queue.pending.popleft()
            work()

    def _run_blocking(self) -> None:
        self._run_all([stream for stream, queue in self.queues.items() if not queue.nonblocking])

    def _run_all(self, streams: list[int]) -> None:
        """Each stream's queue in turn, the one that submitted last first."""
        for stream in sorted(streams, key=self._last, reverse=True):
            self._run(stream)

    def _last(self, stream: int) -> int:
        pending = self.queues[stream].pending
        return pending[-1][0] if pending else 0
