"""Every exception TensorSketch raises, in one place.

::

    TensorSketchError
    ├── GraphValidationError (ValueError)     compile() found a structural mistake
    ├── InvalidUpdateError (ValueError)       a channel rejected this superstep's writes
    ├── EmptyChannelError (LookupError)       a node read a state field nobody has set
    │   └── MissingInputError (ValueError)    a new thread's input lacks a field no node writes
    ├── GraphRecursionError (RecursionError)  the run did not halt within ``max_steps``
    ├── NodeError (TypeError)                 a node broke its contract (wrong return type, ...)
    ├── NodeTimeoutError (TimeoutError)       a node ran past its ``timeout=`` (retryable)
    ├── RoutingError (ValueError)             a router returned a target that does not exist
    ├── Hole (NotImplementedError)            a node whose body is still to be written
    ├── ValidationError (ValueError)          tool arguments / structured output failed validation
    ├── ThreadBusyError (RuntimeError)        another process is running this thread right now
    │   └── LeaseLostError                    this run stalled and lost the thread's lease
    ├── CheckpointDecodeError (ValueError)    a stored checkpoint/journal entry cannot be decoded
    ├── BackendUnavailableError (ConnectionError) the store went away mid-run
    ├── BackendUnsupportedError (NotImplementedError) the store lacks an optional operation
    ├── RegistryError (LookupError)           an unknown provider/backend name
    ├── PluginError (RuntimeError)            a plugin broke the hook protocol
    ├── RunStoreUnsupportedError (TypeError)  the backend keeps no run records (AsyncRunner)
    ├── RunNotFoundError (LookupError)        no run with that id (HTTP 404)
    ├── AssistantNotFoundError (LookupError)  no assistant (or version) by that id or name (404)
    ├── RunConflictError (RuntimeError)       the run's state does not allow that (HTTP 409)
    │   ├── DecisionConflictError (ValueError) a different decision than the one recorded
    │   └── ApprovalMismatchError (ValueError) an approval names another call or other arguments
    ├── ForkEffectError (RuntimeError)        a fork reached an effect its origin ran after the fork
    ├── EffectInDoubtError                    an effect started, recorded no result, policy "fail"
    ├── TransactionUnsupportedError (TypeError) ``ctx.transaction`` on a store that cannot
    ├── QueueFullError (RuntimeError)         AsyncRunner is at max_queued / draining (HTTP 503)
    ├── ExecutorError (RuntimeError)          an executor broke the seam, or a shipped task cannot
    │   └── RemoteTaskError                   (executors) a shipped task's error did not pickle
    ├── DepsUnavailableError (LookupError)    ``ctx.deps`` with no ``deps=`` given, or on a worker
    ├── MemoryUnavailableError (LookupError)  ``ctx.memory`` with no ``memory=``, or on a worker
    │
    │   Defined beside the feature they belong to (its module in brackets):
    ├── ValidationError
    │   └── StructuredOutputError             (provider) a reply never fit the output schema
    ├── ProviderError (RuntimeError)          (provider) a model provider call failed
    │   ├── RateLimitError                    429: retry later
    │   ├── ProviderServerError               5xx from the vendor
    │   ├── ProviderTimeoutError (TimeoutError)
    │   ├── ProviderConnectionError (ConnectionError)
    │   ├── AuthenticationError               a missing or wrong API key
    │   └── BadRequestError                   the vendor refused the request as built
    ├── BudgetExceededError                   (budget) a run spent its token/cost/time budget
    ├── MemoryConflictError (RuntimeError)    (memory) an ``if_rev`` write found another revision
    ├── Interrupt                             (interrupts) control flow: suspend for a decision
    ├── RetryLater                            (interrupts) control flow: suspend until a time
    │
    │   Defined by other distributions, under the same root:
    └── MCPError (RuntimeError)               tensorsketch.interop.mcp: an MCP server failed us
        ├── MCPToolError                      the tool reported ``isError``
        ├── MCPTimeoutError (TimeoutError)    the server did not answer in time
        └── MCPConnectionError (ConnectionError) the server could not be reached / went away

    CanvasError (Exception)                   tensorsketch.canvas: reading or writing source
    ├── SourceParseError (ValueError), GraphNotFoundError (LookupError)
    └── IRError (ValueError), WriteBackError (ValueError)

One warning: ``NotDurableWarning`` (UserWarning) — ``thread_id=`` without ``backend=`` stores
nothing (once per compiled graph).

An exception raised inside a node body is never wrapped: it propagates as itself, with a note
(``add_note``) saying which node and superstep it came from. The one exception is the node's
own ``Out`` failing validation as it is built: that is the node's contract, a ``NodeError``
naming the node (raised from the pydantic ``ValidationError``). ``Interrupt`` and ``RetryLater``
are not errors a caller sees: the run suspends and ``invoke`` returns.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApprovalMismatchError",
    "AssistantNotFoundError",
    "BackendUnavailableError",
    "BackendUnsupportedError",
    "CheckpointDecodeError",
    "DecisionConflictError",
    "DepsUnavailableError",
    "EffectInDoubtError",
    "EmptyChannelError",
    "ExecutorError",
    "ForkEffectError",
    "GraphRecursionError",
    "GraphValidationError",
    "Hole",
    "InvalidUpdateError",
    "LeaseLostError",
    "MemoryUnavailableError",
    "MissingInputError",
    "NodeError",
    "NodeTimeoutError",
    "NotDurableWarning",
    "PluginError",
    "QueueFullError",
    "RegistryError",
    "RoutingError",
    "RunConflictError",
    "RunNotFoundError",
    "RunStoreUnsupportedError",
    "TensorSketchError",
    "ThreadBusyError",
    "TransactionUnsupportedError",
    "ValidationError",
]


class TensorSketchError(Exception):
    """Base class of every error TensorSketch raises itself."""


class GraphValidationError(TensorSketchError, ValueError):
    """``compile()`` rejected the graph. ``problems`` lists every mistake found."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = problems if problems is not None else [message]


class InvalidUpdateError(TensorSketchError, ValueError):
    """A channel cannot fold this superstep's writes (e.g. two writes to a LastValue field)."""


class EmptyChannelError(TensorSketchError, LookupError):
    """A state field was read before anything set it and it has no default."""


class MissingInputError(EmptyChannelError, ValueError):
    """A new thread's input lacks a required field that no node writes: the run would fail
    when a node reads it, after earlier nodes ran, so it is refused before any node runs."""


class GraphRecursionError(TensorSketchError, RecursionError):
    """The run exceeded ``max_steps`` supersteps without the active set becoming empty."""


class NodeError(TensorSketchError, TypeError):
    """A node broke its contract in a way the framework can see (wrong return type, ...)."""


class NodeTimeoutError(TensorSketchError, TimeoutError):
    """A node ran longer than its ``timeout=`` and was cancelled. It is a ``TimeoutError``,
    so the default :class:`~tensorsketch.RetryPolicy` retries it."""

    def __init__(self, message: str, *, node: str = "", timeout: float = 0.0) -> None:
        super().__init__(message)
        self.node = node
        self.timeout = timeout


class RoutingError(TensorSketchError, ValueError):
    """A conditional edge's path function returned something that is not a valid target."""


class Hole(TensorSketchError, NotImplementedError):
    """Raised by a node whose body is not written yet: ``raise Hole("what it should do")``.

    The graph still compiles and type-checks; running reaches the hole and raises it.
    """

    def __init__(self, spec: str = "") -> None:
        super().__init__(spec or "this node needs code")
        self.spec = spec


class ValidationError(TensorSketchError, ValueError):
    """Arguments or structured output failed schema validation.

    The message is written for a model to read and repair: it lists each failing field.
    ``errors`` holds the structured pydantic error list.
    """

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors: list[dict[str, Any]] = errors or []


class ThreadBusyError(TensorSketchError, RuntimeError):
    """Another runner holds this thread's lease; only one writer may run a thread at a time."""


class LeaseLostError(ThreadBusyError):
    """This runner's lease on the thread lapsed or was taken over while it ran (it stalled
    longer than the lease lasts); the store refused its write and the run stopped. The new
    owner's state is intact: invoke the thread again to continue from it."""


class CheckpointDecodeError(TensorSketchError, ValueError):
    """A stored record cannot be decoded (corrupt, unknown type, or a newer schema version)."""


class BackendUnavailableError(TensorSketchError, ConnectionError):
    """The durable store could not be reached; the run stopped and can be resumed later."""


class RegistryError(TensorSketchError, LookupError):
    """An unknown provider or backend name was asked for."""


class PluginError(TensorSketchError, RuntimeError):
    """A plugin returned something the hook protocol does not allow."""


class BackendUnsupportedError(TensorSketchError, NotImplementedError):
    """The backend lacks an optional operation (listing, deleting or pruning threads); it
    implements only the eight required ones."""


class EffectInDoubtError(TensorSketchError):
    """A resumed run found an effect that was started (its intent is journaled) but never
    recorded a result, and the effect's ``in_doubt`` policy is ``"fail"``: nobody can tell
    whether it happened. Check the outside system, then record what happened with
    ``resume={key: {"result": ...}}`` on an ``in_doubt="ask"`` effect, or fork the thread.

    :ivar key: the effect's journal key.
    :ivar call: what the intent recorded (``{"effect", "node", "step", "args"}``).
    """

    def __init__(self, message: str, *, key: str, call: dict[str, Any]) -> None:
        super().__init__(message)
        self.key = key
        self.call = call


class TransactionUnsupportedError(TensorSketchError, TypeError):
    """``ctx.transaction`` was used on a run whose store cannot commit the step's own writes
    together with its journal record (an in-memory run, ``InMemoryBackend``, Redis)."""


class RunStoreUnsupportedError(TensorSketchError, TypeError):
    """The backend has no run store (it implements only the eight checkpoint operations)."""


class RunNotFoundError(TensorSketchError, LookupError):
    """No run with that id in the store."""


class AssistantNotFoundError(TensorSketchError, LookupError):
    """No assistant with that id or name for the runner's graph (or no such version of it)."""


class RunConflictError(TensorSketchError, RuntimeError):
    """The run is not in a state that allows the change (approving a run that is not waiting
    for approval, cancelling a finished run, a repeated event id)."""


class DecisionConflictError(RunConflictError, ValueError):
    """A decision for an interrupt was already recorded (the first one is what the run
    uses), and a different one was sent; ``first`` is the recorded decision. A
    ``ValueError`` too, like the other ``resume=`` mistakes (a server answers 4xx)."""

    def __init__(self, message: str, *, interrupt_id: str, first: Any) -> None:
        super().__init__(message)
        self.interrupt_id = interrupt_id
        self.first = first


class ApprovalMismatchError(RunConflictError, ValueError):
    """An approval decision names a tool call, or a digest of its arguments, other than the
    call the run waits on (the arguments changed by an edit, a fork or a re-plan since the
    approval was asked). Nothing is recorded; ``differs`` says what differs."""

    def __init__(self, message: str, *, interrupt_id: str, differs: str) -> None:
        super().__init__(message)
        self.interrupt_id = interrupt_id
        self.differs = differs


class ForkEffectError(TensorSketchError, RuntimeError):
    """A forked run reached an effect that its origin thread performed after the fork point,
    and the fork was not told what to do with such effects: ``fork(..., effects="reuse")``
    replays the origin's result where the call is identical, ``effects="rerun"`` runs it
    again. ``key`` is the effect's journal key; nothing was run."""

    def __init__(self, message: str, *, key: str, origin: str) -> None:
        super().__init__(message)
        self.key = key
        self.origin = origin


class ExecutorError(TensorSketchError, RuntimeError):
    """An executor (``compile(executor=...)``) broke the seam — reported a task twice or not
    at all — or a task it runs elsewhere asked for what only the caller has (the store)."""


class DepsUnavailableError(TensorSketchError, LookupError):
    """``ctx.deps`` was read where the run has no dependencies: ``invoke`` was not given
    ``deps=``, or the code runs on an executor's worker, where they are never shipped."""


class MemoryUnavailableError(TensorSketchError, LookupError):
    """``ctx.memory`` was read where the run has no memory store: ``invoke`` was not given
    ``memory=``, or the code runs on an executor's worker, where the store is never shipped."""


class QueueFullError(TensorSketchError, RuntimeError):
    """``AsyncRunner`` refused new work: ``max_queued`` runs already wait for a slot, or the
    runner is draining. ``retry_after`` says when to try again (seconds)."""

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NotDurableWarning(UserWarning):
    """A run was given ``thread_id=`` but no ``backend=``: nothing is stored, so the thread
    cannot be resumed, inspected or forked. Pass ``backend=`` to make it durable."""
