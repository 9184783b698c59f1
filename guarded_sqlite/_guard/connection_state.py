"""Per-connection facts the guarded cursors read on every statement (``ConnectionState``), the
``guard_scope`` blocks that swap the policy-derived ones for one thread's statements, and ``settle``:
what happens after each statement besides its cursor (the connection's last report, the report sink).

Split from ``_guard.decide``, which re-exports these for the I/O layers.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from .._core.probe import AGGREGATE_SCREEN
from .._core.serving import FIRST_ROWS
from ..policy import GuardPolicy
from ..report import ReportState
from ..sinks import deliver

if TYPE_CHECKING:
    from .._engines import Engine


class SchemaView(Protocol):
    """A connection's schema view (``catalog.SqliteSchemaView`` or ``SnapshotSchemaView``), typed by the
    one call every view answers: ``catalog``, which imports sqlglot, builds on this module, not the reverse."""

    def explain(self, sql: str, analyser: Any) -> Any: ...


SMALL_RESULT = 2048
"""Below this many rows one set() is cheaper than the early-stopping scan's bookkeeping."""

QUERY_ONLY_RESTORE = 1
"""``query_only_due``: switch SQLite's query_only back off; a guard statement could not (the caller's
progress handler or ``interrupt()`` kept aborting it)."""
QUERY_ONLY_FENCE = 2
"""``query_only_due``: a guard check is calling functions the application registered through this
connection, without query_only (switching it expires every prepared statement of the connection); a
function that runs SQL through the connection gets it switched on first (``decide.settle_query_only``)."""
QUERY_ONLY_FENCED = 3
"""``query_only_due``: the fence switched query_only on; the check switches it off when it ends."""
QUERY_ONLY_KEPT = 4
"""``query_only_due``: the fence found query_only on already (the caller's setting); it stays as it is."""


class ConnectionState:
    """Per-connection facts the cursors need on every statement, in plain slots. The ones derived from
    the policy are set by ``configure``; a ``policy_scope`` swaps them for one thread's statements."""

    __slots__ = (
        "_connection",
        "aggregate_screen",
        "blobs",
        "byte_cap",
        "catalog",
        "confirmations",
        "defan",
        "dialect",
        "driver_options",
        "engine",
        "epoch",
        "extensions_loadable",
        "fetch_size",
        "first_fetch",
        "last",
        "listed_functions",
        "lock",
        "mode",
        "one_row",
        "p2_rows",
        "policy",
        "preset",
        "query_only_due",
        "quick_below",
        "raw_ref",
        "registered_functions",
        "rescue_spend",
        "rescues",
        "scopes",
        "serial",
        "sink",
        "started",
        "status_results",
        "tau_below",
        "views",
    )

    def __init__(self, policy: GuardPolicy, engine: Engine, proxy: Any, raw: Any, single_thread: bool) -> None:
        """``proxy``: the object cursors report as their ``connection``; ``raw``: the driver's connection
        the engine re-executes on (the same object for ``connect()``'s connections).

        ``proxy`` holds this state, so it is held weakly: a connection referring back to itself is a
        reference cycle, and only the cyclic collector would close a connection dropped unclosed, in
        whatever thread it happens to run (sqlite3 closes it where it is dropped). ``raw`` is held
        weakly for the same reason when it is ``proxy``, else strongly (a sqlite3 connection has no
        weak references, and the driver's connection never refers to the guard)."""
        self._connection = weakref.ref(proxy)
        self.raw_ref: Callable[[], Any] = self._connection if raw is proxy else _Held(raw)
        self.engine = engine
        self.dialect = engine.dialect
        self.status_results = engine.status_results  # read on every statement: kept in a slot
        self.driver_options = engine.name == "postgres"  # psycopg's execute takes prepare=/binary=
        self.policy = policy  # set_threading reads the mode
        self.mode = policy.mode
        self.preset = policy.preset
        self.set_threading(single_thread)
        self.configure(policy)
        self.rescues = 0  # rescues run on this connection, for GuardPolicy.max_rescues
        self.rescue_spend = 0.0  # their known cost in USD, for GuardPolicy.max_rescue_cost
        # What SQLite's query_only needs before the next statement through this connection's own
        # methods (``decide.settle_query_only``): nothing (0), or see QUERY_ONLY_RESTORE and QUERY_ONLY_FENCE.
        self.query_only_due = 0
        # Provenance: the schema view (``catalog``), made by the first statement a rule asks about.
        self.catalog: SchemaView | None = None
        self.last: ReportState | None = None  # the last statement's state, for the connection's guard_report
        self.scopes = 0  # policy_scope blocks open on this connection, in any thread
        # The application's functions, which the guard never calls again by re-running a statement:
        # those the engine lists as not built in (SQLite's function list, read once, at the first
        # join-copy check: reading it costs 0.4 ms), and those registered through the guarded
        # connection object since (create_function and its kin), which DuckDB cannot tell apart.
        self.listed_functions: frozenset[str] | None = None
        # (stamp, folded names of the views whose body joins): ``aggregate_check.joining_views``
        self.views: tuple[Any, frozenset[str]] | None = None
        self.registered_functions: frozenset[str] = frozenset()
        # Whether native code may have registered (or replaced) functions since: extension loading was
        # enabled through the connection. The guard's checks then never run without query_only.
        self.extensions_loadable = False
        # Aggregate confirmations kept while the data is unchanged (guarded_sqlite._rules.confirmations), and the
        # count of what changes the data or the schema unseen by SQLite's version numbers.
        self.confirmations: dict[Any, Any] = {}
        self.epoch = 0
        # Blob handles opened for writing through the connection (weak: the caller's to close or drop).
        self.blobs: list[weakref.ref[Any]] = []

    def configure(self, policy: GuardPolicy) -> None:
        """The slots derived from ``policy``."""
        self.policy = policy
        self.mode = policy.mode
        self.preset = policy.preset
        self.fetch_size = policy.row_cap + 1  # rows fetched per statement: one more than are buffered
        self.byte_cap = policy.byte_cap
        # The first fetch of every statement: all it may buffer, or with a byte budget the first rows
        # only (fetch_rest continues when they come back full).
        self.first_fetch = self.fetch_size if policy.byte_cap is None else min(FIRST_ROWS, self.fetch_size)
        # The text_to_sql threshold when P1 may fire below tau_inject, else None (read per statement).
        self.tau_below: float | None = policy._tau_act if policy._tau_act < policy.tau_inject else None
        # Results of fewer rows than this, without a single duplicate, need nothing but the count: no
        # rule can apply (P2 needs at least policy._p2_min_rows rows), no early-stopping scan pays off.
        limits = [SMALL_RESULT, policy.row_cap + 1]
        # From this many rows on, a DISTINCT query may be a P2 candidate (never outside patch mode).
        self.p2_rows = policy._p2_min_rows if policy.mode == "patch" else SMALL_RESULT
        if self.tau_below is not None and self.tau_below <= 0:
            limits.append(0)
        self.quick_below = min(limits)
        self.sink = policy.on_report if policy.mode != "off" else None
        # The aggregate fan-out rule: the pre-screen's answers per SQL text when the rule runs (patch mode,
        # not the paper preset: observe mode runs nothing extra, and the rule must read the catalog and
        # run the corrected query), and whether confirmed corrections are served (text_to_sql only).
        self.aggregate_screen = AGGREGATE_SCREEN if policy.mode == "patch" and policy.provenance != "off" else None
        self.defan = policy.mode == "patch" and policy.provenance == "text_to_sql"
        self.serial = self.lock if policy.mode != "off" else None
        # perf_counter_ns() when the current statement started (0: not known), for the confirmation's budget.
        self.started = 0
        # The state of the last healthy single-row result (decide.after_fetch), reused while the SQL repeats.
        self.one_row: ReportState | None = None

    @property
    def proxy(self) -> Any:
        """The connection object users hold (alive while the guard is in use: it and its cursors hold
        this state, and each cursor holds its connection)."""
        return self._connection()

    @property
    def raw(self) -> Any:
        """The driver's connection the engine runs the guard's statements on (``raw_ref()``: what keeps
        it, such as the schema view, holds it as this state does)."""
        return self.raw_ref()

    def set_threading(self, single_thread: bool) -> None:
        # Patch re-execution flips PRAGMA query_only for the whole connection; statements issued
        # through this connection from other threads wait on this lock instead of hitting that window.
        # A connection sqlite3 itself keeps to one thread (check_same_thread=True) needs none.
        self.lock: threading.RLock | None = None if single_thread else threading.RLock()
        # The lock a statement takes. Patch mode runs statements of its own; observe mode steps through
        # a whole result at execute(), a much longer window than sqlite3's single step, during which
        # other threads' statements on the shared connection can trip sqlite3's own races ("another
        # row available"); so both serialise. "off" is sqlite3 itself.
        self.serial = self.lock if self.policy.mode != "off" else None

    def in_scope(self) -> ConnectionState:
        """The state this thread's statements use: a ``policy_scope``'s, or this one."""
        for base, scoped in reversed(_SCOPES.get()):
            if base is self:
                return scoped
        return self


class _Held:
    """A strong reference with a weak reference's call: ``raw_ref`` for a driver connection that is not
    the connection users hold."""

    __slots__ = ("held",)

    def __init__(self, held: Any) -> None:
        self.held = held

    def __call__(self) -> Any:
        return self.held


class _ScopedState(ConnectionState):
    """A ``ConnectionState`` under another policy for one thread's block: the slots derived from the
    policy are its own, the connection's facts (schema view, rescue budget, lock, last report) are the
    base state's."""

    __slots__ = ("base",)

    def __init__(self, base: ConnectionState, policy: GuardPolicy) -> None:
        # Not ConnectionState.__init__: that would reset the facts this state shares with ``base``.
        self.base = base
        for name in ("engine", "dialect", "status_results", "driver_options", "_connection", "raw_ref"):
            setattr(self, name, getattr(base, name))
        self.configure(policy)

    def set_threading(self, single_thread: bool) -> None:
        self.base.set_threading(single_thread)


def _shared(name: str) -> property:
    def read(scoped: _ScopedState) -> Any:
        return getattr(scoped.base, name)

    def write(scoped: _ScopedState, value: Any) -> None:
        setattr(scoped.base, name, value)

    return property(read, write)


# ``serial`` stays the scope's own: configure() sets it from the shared lock and the scope's mode.
_SHARED = (
    "blobs",
    "catalog",
    "confirmations",
    "epoch",
    "rescues",
    "rescue_spend",
    "query_only_due",
    "last",
    "scopes",
    "lock",
    "views",
)
for _name in (*_SHARED, "extensions_loadable", "listed_functions", "registered_functions"):
    setattr(_ScopedState, _name, _shared(_name))

_SCOPES: contextvars.ContextVar[tuple[tuple[ConnectionState, ConnectionState], ...]] = contextvars.ContextVar(
    "guarded_sqlite_scopes", default=()
)
"""The ``policy_scope`` blocks open in this thread (or task): (connection's state, scoped state), innermost last."""
_SCOPE_COUNT = threading.Lock()


@contextlib.contextmanager
def policy_scope(guard: ConnectionState, policy: GuardPolicy) -> Iterator[None]:
    """``policy`` for the statements this thread issues through the connection inside the block;
    other threads keep the connection's policy. Restored on exit, whatever ends the block."""
    if isinstance(guard, _ScopedState):
        guard = guard.base
    token = _SCOPES.set((*_SCOPES.get(), (guard, _ScopedState(guard, policy))))
    with _SCOPE_COUNT:
        guard.scopes += 1
    try:
        yield
    finally:
        with _SCOPE_COUNT:
            guard.scopes -= 1
        _SCOPES.reset(token)


def note_function(guard: ConnectionState, name: object) -> None:
    """Remember a function the application registered through the guarded connection object."""
    guard.registered_functions = guard.registered_functions | {str(name).lower()}
    guard.epoch += 1


def note_change(guard: ConnectionState) -> None:
    """Something changed the data or the schema that SQLite's version numbers may not show (a statement
    returning no rows, ``deserialize()``, a backup into the connection): no kept confirmation holds."""
    guard.epoch += 1


def note_blob(guard: ConnectionState, blob: Any, readonly: bool) -> None:
    """A blob handle opened through the connection (``blobopen``). Its writes are not statements: they
    move neither ``total_changes`` nor, on the connection's own database, ``data_version`` (c21). So
    what was kept before goes now, and nothing is kept or reused while the handle may write."""
    if readonly:
        return
    guard.epoch += 1
    # sqlite3 tracks its blobs by weak reference too, so a Blob always takes one. Closed ones go here
    # as well: an application writing many blobs and running no check must not grow the list.
    guard.blobs = [*(handle for handle in guard.blobs if _is_open(handle())), weakref.ref(blob)]


def writing_blob(guard: ConnectionState) -> bool:
    """Whether a blob handle ``note_blob`` saw may still write: not closed, nor collected."""
    open_handles = [handle for handle in guard.blobs if _is_open(handle())]
    if len(open_handles) != len(guard.blobs):
        guard.blobs = open_handles
    return bool(open_handles)


def _is_open(blob: Any) -> bool:
    if blob is None:
        return False
    try:
        len(blob)
    except Exception:  # sqlite3.ProgrammingError: the blob (or its connection) is closed
        return False
    return True


def settle(guard: ConnectionState, state: ReportState, cursor: Any) -> None:
    """After each statement on ``cursor``: the connection's last report, and the policy's report sink."""
    guard.last = state
    sink = guard.sink
    if sink is not None:
        deliver(sink, state, cursor)
