"""dldoctor's C++ core (glue only)"""

from collections.abc import Sequence
import types


class CoreError(Exception):
    pass

def collect_facts(shm_path: str = '/dev/shm', proc_root: str = '/proc', sys_root: str = '/sys', root: str = '/') -> dict:
    """
    Facts about this process's machine as nested dicts (cpu, memory, shm, limits, container, pressure); None where a source could not be read. The roots are for tests.
    """

def probe_storage(path: str, max_seconds: float = 2.0, max_files: int = 100000) -> dict:
    """
    The storage behind a data directory: filesystem, disk, a bounded file count and a page-cache-bypassing read probe. Raises CoreError when the path is missing.
    """

def top_cpu_users(window_s: float = 1.0, count: int = 5, min_pct: float = 1.0, proc_root: str = '/proc') -> list:
    """
    The processes that used the CPU most over the next window_s seconds (two readings of every /proc/<pid>/stat), most first: dicts of pid, comm, cmdline and cpu_pct (percent of one CPU); at most count, each with at least min_pct. Empty when /proc cannot be listed.
    """

class Sampler:
    """
    Samples a process tree from /proc on its own thread (never holding the GIL). Snapshots are dicts; unknown values are None.
    """

    def __init__(self, root_pid: int, interval_s: float = 0.1, smaps_every: int = 10, threads: bool = False, capacity: int = 600, smaps_budget_pct: float = 0.05, total_budget_pct: float = 0.0, gpus: bool = False) -> None: ...

    def add_root(self, pid: int) -> None:
        """Also sample pid and its descendants."""

    def start(self) -> None:
        """Start the sampling thread (no-op when running)."""

    def stop(self) -> None:
        """Stop and join the sampling thread."""

    @property
    def running(self) -> bool: ...

    def sample_once(self) -> dict:
        """Take one pass now and return it."""

    def latest(self) -> object:
        """The newest snapshot, or None before the first pass."""

    def history(self, max: int = 0) -> list:
        """The newest max snapshots (all kept when 0), oldest first."""

    @property
    def samples_taken(self) -> int: ...

    @property
    def cost_ns_total(self) -> int: ...

    def __enter__(self) -> Sampler: ...

    def __exit__(self, exc_type: object | None, exc: object | None, tb: object | None) -> None: ...

class EventRing:
    """The shared-memory event ring (many writers, one reader)."""

    @staticmethod
    def create(path: str, capacity: int = 65536) -> EventRing:
        """Create the ring file at path (it must not exist) with capacity slots."""

    @staticmethod
    def open(path: str) -> EventRing:
        """Map an existing ring file."""

    def drain(self, max: int = 0) -> list:
        """
        Committed events in order, as tuples (kind, pid, t_ns, flags, loader, worker, index, count, v0, v1, v2, v3, weight); max=0 takes all.
        """

    def emit(self, kind: int, loader: int = 0, worker: int = -1, index: int = -1, count: int = 0, t_ns: int = 0, v0: int = 0, v1: int = 0, v2: int = 0, v3: int = 0, flags: int = 0, weight: int = 0) -> bool:
        """Append one event through this mapping (t_ns=0: now). False when full."""

    def next_loader_id(self) -> int: ...

    def progress(self, loader: int, epoch: int) -> int:
        """
        The next batch loader's main process will hand out in epoch (noted at each hand-out, measured or not); -1 when none was noted.
        """

    def set_stall_timeout(self, seconds: float) -> None:
        """How long to wait for a reserved slot before skipping it as lost."""

    @property
    def dropped(self) -> int: ...

    @property
    def lost(self) -> int: ...

    @property
    def pending(self) -> int: ...

    @property
    def capacity(self) -> int: ...

    @property
    def path(self) -> str: ...

    @property
    def watcher_pid(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def close(self) -> None:
        """Unmap the ring now (the file stays)."""

    def __enter__(self) -> EventRing: ...

    def __exit__(self, *args) -> None: ...

def trace_open(path: str) -> bool:
    """
    Open the ring this process writes to (once per process; forked children inherit it). Raises CoreError with one line when the file is not a usable ring.
    """

def trace_emit(kind: int, loader: int, worker: int, index: int, count: int, t_ns: int, v0: int = 0, v1: int = 0, v2: int = 0, v3: int = 0, flags: int = 0, weight: int = 0) -> bool:
    """
    Record one event from this process (t_ns=0: now). False when no ring is open or it is full; never raises.
    """

def trace_vocabulary() -> dict:
    """
    The event vocabulary of trace/event.hpp, its one definition: {'kind': {name: value}, 'loader_flag', 'batch_flag', 'start_method', 'iter_end_reason'}, and 'event_fields', the names of an event tuple's fields.
    """

def trace_next_loader_id() -> int:
    """A loader id unique across the job's processes; 0 when no ring is open."""

def trace_active() -> bool: ...

def trace_path() -> str: ...

def trace_pid() -> int:
    """The pid events from this process carry."""

def trace_close() -> None:
    """Stop writing (tests and uninstall)."""

def monotonic_ns() -> int:
    """CLOCK_MONOTONIC in ns (the clock of every event)."""

def thread_cpu_ns() -> int:
    """CPU time of the calling thread in ns."""

class HotMethod:
    """
    A dldoctor hook standing in for a torch method: calls the original with the same arguments and records the batch.
    """

    def __repr__(self, /):
        """Return repr(self)."""

    def __call__(self, /, *args, **kwargs):
        """Call self as a function."""

    def __get__(self, instance, owner=None, /):
        """Return an attribute of instance, which is of type owner."""

    __vectorcalloffset__: types.MemberDescriptorType = ...

    original: types.MemberDescriptorType = ...

    role: types.MemberDescriptorType = ...

class IterState:
    """
    IterState(loader_id, multiprocess): a main-process iterator's state, read by the batch hooks.
    """

    take_unmeasured: types.MethodDescriptorType = ...

    loader_id: types.MemberDescriptorType = ...

    multiprocess: types.MemberDescriptorType = ...

    ended: types.MemberDescriptorType = ...

    in_next: types.MemberDescriptorType = ...

    pid: types.MemberDescriptorType = ...

    epoch: types.MemberDescriptorType = ...

    last_handout: types.MemberDescriptorType = ...

    wait_ns: types.MemberDescriptorType = ...

    got_idx: types.MemberDescriptorType = ...

    got_worker: types.MemberDescriptorType = ...

    died: types.MemberDescriptorType = ...

    ref: types.MemberDescriptorType = ...

    batches: getset_descriptor = ...

class BatchContext:
    """This process's batch-hook context (one instance: _ext.batch_context)."""

    configure: types.MethodDescriptorType = ...

    reset: types.MethodDescriptorType = ...

    forget_states: types.MethodDescriptorType = ...

    begin_worker: types.MethodDescriptorType = ...

    take_unmeasured: types.MethodDescriptorType = ...

    worker_fetches: types.MethodDescriptorType = ...

    sample_period: types.MethodDescriptorType = ...

    loader: types.MemberDescriptorType = ...

    worker: types.MemberDescriptorType = ...

    index: types.MemberDescriptorType = ...

    epoch: types.MemberDescriptorType = ...

    index_from_frame: types.MemberDescriptorType = ...

    wait_hooked: types.MemberDescriptorType = ...

    worker_started: types.MemberDescriptorType = ...

    process_fetches: types.MemberDescriptorType = ...

    cuda_next_ns: types.MemberDescriptorType = ...

batch_context: BatchContext = ...

def hot_method(role: str, original: object) -> object:
    """
    A HotMethod standing in for `original`: role is one of fetch, collate, index_get, single_next, multi_next, get_data.
    """

def batch_hook_constants() -> dict:
    """
    The batch hooks' schedule: profile candidates, detail sampling, batch sampling.
    """

SHM_MARGIN: float = 2.0

NOFILE_WARN_BELOW: int = 8192

DEFAULT_PREFETCH_FACTOR: int = 2

RAM_LOW_FRACTION: float = 0.1

MAIN_PROCESS_CORES: int = 1

CACHE_FIT_FRACTION: float = 0.5

RECENT_WINDOW_S: float = 10.0

def tune_next(profile: object, trials: object) -> object:
    """
    The next trial's settings (a dict by DataLoader keyword; {} the job's own), or None: from the diagnostic run's profile and the trials so far ({'settings', 'batches_per_s', 'ci', 'outcome'}, the job's own settings first).
    """

def tune_best(trials: object) -> object:
    """The index of the best trial (a gain must beat kMinGain), or None."""

def tune_ceiling(profile: object) -> object:
    """What limits throughput next: {'limit', 'batches_per_s'}, or None."""

def tune_effective(profile: object, settings: object) -> dict:
    """The settings with the job's own filled in."""

TUNE_MIN_GAIN: float = 0.05

def shm_fix(container_kind: str, in_flight_bytes: float) -> str:
    """
    The fix for a /dev/shm that must hold in_flight_bytes (SHM_MARGIN times over), as shm_exhausted and `dldoctor check` word it: whole GiB, then Docker, Kubernetes and bare-metal commands (container_kind's first), then fewer batches in flight.
    """

class Analyzer:
    """
    The streaming analyzer of one job: feed it events and sampler passes, ask for findings over the last ~10 s or the whole run.
    """

    def __init__(self) -> None: ...

    def set_facts_dict(self, facts: object) -> None:
        """
        Machine facts as collect_facts() returns them (missing keys are unknown); a 'storage' key (probe_storage()'s dict) also sets the data storage.
        """

    def set_data_storage_dict(self, storage: object) -> None:
        """The storage behind the dataset, as probe_storage() returns it."""

    def ingest_event(self, event: object) -> None:
        """
        One event: (kind, pid, t_ns, flags, loader, worker, index, count, v0, v1, v2, v3).
        """

    def ingest_events(self, events: object) -> None:
        """Many events (an iterable of 12-tuples)."""

    def ingest_snapshot(self, snapshot: object) -> None:
        """One sampler pass as a dict (None = unknown)."""

    def note_worker_pid(self, loader: int, worker: int, pid: int, t_ns: int = 0) -> None:
        """
        Registers pid as worker `worker` of `loader` (kWorkerStart events do this).
        """

    def add_hot_functions(self, loader: int, functions: object) -> None:
        """
        Hot functions of a loader's fetch from sampled profiles: dicts with name, location (or file and line), cumulative_ms, self_ms, calls. Figures add up over calls.
        """

    def findings(self, now_ns: int = 0, whole_run: bool = True) -> list:
        """
        Findings as dicts, most important first: over the whole run, or (whole_run=False) over the ~10 s before now_ns (0: the newest time seen).
        """

    def verdict(self, findings: object) -> str:
        """The id of the most important critical finding, else 'healthy'."""

    def loaders(self) -> list:
        """Per-loader whole-run figures as dicts, by loader id."""

    @property
    def latest_ns(self) -> int:
        """Newest timestamp seen (0: none)."""

    @property
    def events(self) -> int:
        """Events ingested so far."""

def hang_stack_signal() -> int:
    """
    The signal the hooks register their safe-point stack dump on (job.stackdump.STACK_SIGNAL).
    """

def native_stack_signal(signal: int) -> int:
    """
    The signal the hooks register faulthandler's one-thread dump on, beside `signal` (job.stackdump.STACK_SIGNAL_NATIVE).
    """

def parse_faulthandler(text: str) -> list:
    """
    Parses faulthandler's all-threads output into [{thread_id, current, no_python_frame, elided, truncated, frames: [{file, line, function, code}]}], most recent call first.
    """

def probe_process(pid: int, threads: bool = True) -> dict:
    """
    Kernel view of a process: {pid, gone, state, comm, wchan, syscall, syscall_nr, cpu_ns, num_threads, exit_code, exit_signal, threads}; unknown fields are None, a vanished pid has gone=True and state 'gone'.
    """

def capture_stacks(pids: object, run_dir: str, signal: int = 58, wait_ms: int = 500) -> dict:
    """
    Sends `signal` to the main thread of each pid that handles it (native_stack_signal(signal) when no stack comes within 150 ms) and returns {pid: text appended to <run_dir>/stack-<pid>.txt} ('' when nothing came within wait_ms).
    """

def capture_stacks_detail(pids: object, run_dir: str, signal: int = 58, wait_ms: int = 500) -> dict:
    """
    As capture_stacks, with why a stack is missing and whether the native signal was sent: {pid: {text, note, gone, native}}.
    """

def classify_hang(snapshot: object, context: object | None = None) -> list:
    """
    The hang rules over a dict-shaped HangSnapshot ({t_ns, stalled_s, timeout_s, processes: [{pid, loader, worker, state, wchan, syscall, cpu_ns_since_stall, cpu_window_s, raw_stack | stacks, gone, exit_code, exit_signal, io_target}]}) and HangContext ({loaders: [{loader, num_workers, collate_fn, worker_init_fn, start_method, main_threads_at_fork, main_thread_names_at_fork, waiting_batch, waiting_worker, outstanding, batches_returned, timeout_s}]}) -> [finding dict].
    """

def default_hang_timeout_s(p99_inter_batch_ns: int | None = None) -> float:
    """max(60 s, 10 x p99 gap between batches)."""

class Watchdog:
    """
    The hang watchdog thread; `probe()` returns {loader_active, waiting, last_batch_ns, active_since_ns, processes: [{pid, loader, worker}], context}; `on_hang(snapshot, findings)` is called once per stall.
    """

    def __init__(self, probe: object, on_hang: object | None = None, run_dir: str = '', signal: int = 58, timeout_s: float | None = None, poll_s: float = 0.25, stack_wait_ms: int = 500, min_timeout_s: float = 60.0, p99_factor: float = 10.0) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    @property
    def running(self) -> bool: ...

    def note_batch(self, t_ns: int) -> None: ...

    def note_inter_batch_ns(self, ns: int) -> None: ...

    def set_timeout_override(self, seconds: float | None) -> None: ...

    @property
    def timeout_s(self) -> float: ...

    @property
    def p99_inter_batch_ns(self) -> object: ...

    @property
    def hangs(self) -> int: ...

    def check(self, now_ns: int) -> bool: ...

    def last_snapshot(self) -> object: ...

    def last_findings(self) -> list: ...

class Monitor:
    def __init__(self, ring_path: str, capacity: int = 65536, interval_s: float = 0.1, run_dir: str = '', hang_timeout_s: float | None = None, trace_max_events: int = 0) -> None: ...

    @property
    def ring_path(self) -> str:
        """
        The path the job's processes open the ring by (for a ring in memory, /proc/<pid>/fd/<n>).
        """

    def start(self, root_pid: int) -> None: ...

    def stop(self) -> None: ...

    def collect_facts(self) -> dict:
        """
        Reads this machine's facts (as collect_facts()), hands them to the analysis as they are, and returns them as the dict the report's `system` section shows.
        """

    def set_data_storage(self, arg: object, /) -> None: ...

    def add_hot_functions(self, arg0: int, arg1: object, /) -> None: ...

    def note_failure(self, note: object) -> None:
        """A failure note (dict with 'kind') from the side logs."""

    def findings(self, whole_run: bool = True) -> list: ...

    def decide(self, whole_run: bool = True) -> dict:
        """
        The report decided: {'verdict', 'findings', 'note'}, most important first; over the whole run the newest hang's findings are merged in. 'unknown' when no DataLoader was seen, or a run too short to judge would be 'healthy'; 'note' says why ('' otherwise).
        """

    def loaders(self) -> list: ...

    def note_dataset(self, arg0: int, arg1: object, /) -> None: ...

    def note_slow_batch(self, arg0: int, arg1: object, /) -> None: ...

    def note_rank(self, loader: int, rank: int | None = None, local_rank: int | None = None, world_size: int | None = None, local_world_size: int | None = None, group_rank: int | None = None) -> None:
        """
        The rank of a loader's main process (the iter_start record's rank fields).
        """

    def note_torch_threads(self, arg0: int, arg1: int, /) -> None: ...

    def set_loader_notes(self, loader: int, collate_fn: str = '', worker_init_fn: str = '', main_threads: int | None = None, main_thread_names: Sequence[str] = []) -> None: ...

    def last_hang(self) -> object: ...

    def series(self) -> dict:
        """
        The run over time: per loader, per worker and machine series (Report.series).
        """

    def live(self) -> dict:
        """The figures of the last two seconds, for the live view."""

    def trace_events(self) -> object:
        """
        Raw events and counters kept for --trace (None unless trace_max_events > 0).
        """

    @property
    def hangs(self) -> int: ...

    @property
    def hang_timeout_s(self) -> float: ...

    @property
    def events_seen(self) -> int: ...

    @property
    def dropped(self) -> int: ...

    @property
    def last_batch_ns(self) -> int: ...

STACK_IDLE_SHARE: float = 0.2

MIN_STACK_SAMPLES: int = 20

class Attach:
    """
    `dldoctor attach`'s session: samples the attached tree from /proc on its own thread, takes py-spy's stack samples, and decides the report.
    """

    def __init__(self, loaders: object, interval_s: float = 0.1) -> None:
        """
        loaders: [{loader, main_pid, num_workers, worker_pids, start_method, pin_memory, persistent_workers, collate_fn, worker_init_fn}]; reads the machine's facts.
        """

    def start(self, roots: Sequence[int]) -> None:
        """Starts sampling the trees under `roots` (the main processes)."""

    def stop(self) -> None:
        """Stops sampling; the window ends now."""

    def add_samples(self, pid: int, frames: object, threads: object, failed: int = 0, period_ms: float = 0.0) -> None:
        """
        One process's stack samples: frames [(name, file, line)], threads [(name, tid, [(frame indices root first, count)])], samples that failed, ms per sample.
        """

    def keep_loaders(self, ids: Sequence[int]) -> None:
        """
        Forgets every loader not in `ids` (mains whose samples showed no loader).
        """

    def stuck_loaders(self) -> list:
        """Loaders whose main process sat in them while nothing of them used CPU."""

    def capture_hang(self, dumps: object, notes: object | None = None, threads_at_fork: object | None = None) -> dict:
        """
        Captures the stuck tree (kernel view, CPU since the window began) with `dumps` ({pid: py-spy dump's JSON threads}), `notes` ({pid: why no stack}) and `threads_at_fork` ({main pid: names of its threads older than its workers}), and classifies it: {snapshot, findings}.
        """

    def decide(self) -> dict:
        """
        The report decided: {verdict, findings}, the hang's findings merged in.
        """

    def loaders(self) -> list:
        """The loaders for the report (None: unknown)."""

    def tallies(self) -> list:
        """Per process: its stack samples by place."""

    def facts(self) -> dict:
        """The machine's facts, narrowed to the job."""

    def series(self) -> dict:
        """The window over time (Report.series)."""

    @property
    def passes(self) -> int:
        """Sampler passes taken."""

def merge_nodes(reports: list) -> dict:
    """
    Several nodes' reports ({name, verdict, findings, loaders, system}) as one job: {verdict, nodes: [{index, slowest_loader, ranks, main_processes, workers, usable_cpus, shm_in_flight_bytes, shm_free_bytes}] slowest first, findings: [(node, finding)] in the job's order, slowest: (node, loader) or None}.
    """
