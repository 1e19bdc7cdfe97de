"""The HTML report: one self-contained file (plotly.js inlined, nothing fetched) with the
verdict, each finding as Diagnosis / Evidence / Fix / Why, the per-loader table, the run
over time (batches/s, data stall, the GPU beside it, per-worker CPU, state and run-queue
delay, shm, memory, GPU memory, storage reads), the per-worker distribution of getitem and collate times, and after a hang
the stuck processes' stacks. Rendered from a Report alone, so `dldoctor report F.json
--html F` gives the same page later.

Needs plotly (`pip install 'dldoctor[html]'`).
"""

from __future__ import annotations

import html
import math

from ..errors import DldoctorError
from ..report import loader_label, loader_labels
from . import evidence, loader_table
from .terminal import _LOADER_COLUMNS, _fmt

SEVERITY_COLOR = {"critical": "#c62828", "warning": "#b26a00", "info": "#1565c0"}
# Process states as /proc/<pid>/stat writes them, in heatmap order.
STATES = [
    ("R", "running", "#2e7d32"),
    ("S", "sleeping", "#90a4ae"),
    ("D", "uninterruptible (I/O)", "#ef6c00"),
    ("T", "stopped", "#6a1b9a"),
    ("Z", "zombie / exited", "#c62828"),
    ("?", "other", "#000000"),
]
X_TITLE = "seconds since the job started"
# /dev/shm used under this share of its size would be a flat line at zero against the size
# (a few MiB against a 24 GiB tmpfs): the used line is then drawn on its own scale.
SHM_OWN_SCALE_BELOW = 0.10
# Before the first batch the loop charts are empty; a start longer than this is marked with
# why (the job starting, the workers spawning), shorter ones would only clutter the chart.
START_MARK_MIN_S = 0.5


def require_plotly():
    """The plotly modules; a one-line error with the install command when missing."""
    try:
        import plotly.graph_objects as go
        import plotly.offline as po
    except ImportError:
        raise DldoctorError(
            "the HTML report needs plotly: pip install 'dldoctor[html]' (or pip install plotly)"
        ) from None
    return go, po


def write(path: str, report) -> None:
    text = render(report)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise DldoctorError(f"cannot write the HTML report to {path}: {e.strerror}") from None


def render(report) -> str:
    go, po = require_plotly()
    charts = _charts(report, go)
    body = [
        _header(report),
        _notes(report),
        _findings(report),
        _hang(report),
        _loaders(report),
    ]
    chart_html = []
    for section, items in charts:
        chart_html.append(f"<h2>{html.escape(section)}</h2>")
        for fig_id, title, fig, note in items:
            div = fig.to_html(
                full_html=False,
                include_plotlyjs=False,
                div_id=fig_id,
                config={"displaylogo": False, "responsive": True},
            )
            note_html = (
                f'<p class="note">{note}</p>' if note else ""
            )  # notes are this module's own HTML
            chart_html.append(
                f'<div class="chart" data-title="{html.escape(title)}">{div}{note_html}</div>'
            )
    if not charts:
        chart_html.append(
            '<p class="note">No time series in this report (it was written without them).</p>'
        )
    missing = _missing_series(report)
    if missing:
        chart_html.append(
            '<p class="note">Not measured in this run: ' + html.escape(", ".join(missing)) + "</p>"
        )
    title = f"dldoctor: {report.verdict}"
    return _PAGE.format(
        title=html.escape(title),
        css=_CSS,
        plotly_js=po.get_plotlyjs().replace("</script", "<\\/script"),
        body="\n".join(b for b in body if b) + "\n" + "\n".join(chart_html),
    )


# -- text sections ---------------------------------------------------------------------------


def _header(report) -> str:
    v = report.verdict
    cls = "healthy" if v == "healthy" else ("unknown" if v == "unknown" else "bad")
    cmd = " ".join(report.command or [])
    sub = []
    if cmd:
        sub.append(f"<code>{html.escape(cmd)}</code>")
    if report.exit_code is not None:
        sub.append(f"exit code {report.exit_code}")
    sub.append(f"dldoctor {html.escape(str(report.tool_version))}")
    sysinfo = report.system or {}
    facts = []
    if sysinfo.get("usable_cpus") is not None:
        facts.append(f"{_num(sysinfo['usable_cpus'])} usable CPUs")
    if sysinfo.get("mem_total_bytes"):
        facts.append(f"{sysinfo['mem_total_bytes'] / 2**30:.1f} GiB RAM")
    if sysinfo.get("shm_total_bytes"):
        facts.append(f"/dev/shm {sysinfo['shm_total_bytes'] / 2**30:.2f} GiB")
    gpus = ((sysinfo.get("facts") or {}).get("gpu") or {}).get("devices") or []
    if gpus:
        names = sorted({g.get("name") or "?" for g in gpus})
        facts.append(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} ({', '.join(names)})")
    if facts:
        sub.append(", ".join(facts))
    healthy_text = " — the DataLoader keeps up with the consumer" if v == "healthy" else ""
    return (
        "<header><h1>dldoctor report</h1>"
        f'<div class="verdict {cls}" id="verdict">verdict: <b>{html.escape(v)}</b>'
        f"{healthy_text}</div>"
        f'<div class="sub">{" · ".join(sub)}</div></header>'
    )


def _notes(report) -> str:
    if not report.notes:
        return ""
    items = "".join(f"<li>{html.escape(n)}</li>" for n in report.notes)
    return f'<ul class="notes">{items}</ul>'


def _findings(report) -> str:
    if not report.findings:
        return '<h2>Findings</h2><p class="note">No findings.</p>'
    out = ["<h2>Findings</h2>"]
    for f in report.findings:
        sev = f.get("severity", "info")
        color = SEVERITY_COLOR.get(sev, "#555")
        ev = f.get("evidence") or {}
        rows = "".join(
            f'<tr><th colspan="2">{html.escape(group)}</th></tr>'
            + "".join(
                f"<tr><td>{html.escape(label)}</td><td>{html.escape(value)}</td></tr>"
                for label, value in entries
            )
            for group, entries in evidence.grouped(ev)
        )
        rows += "".join(
            f'<tr><td colspan="2" class="differ">{html.escape(line)}</td></tr>'
            for line in evidence.differing_figures(ev)
        )
        parts = [
            f'<div class="finding" id="finding-{html.escape(f["id"])}" style="border-color:{color}">',
            f'<div class="fid" style="color:{color}">{html.escape(f["id"])} '
            f'<span class="sev">({html.escape(sev)})</span></div>',
            f'<div class="row"><span class="lbl">Diagnosis</span>{html.escape(evidence.short_paths(f.get("title", "")))}</div>',
        ]
        if rows:
            parts.append(
                '<div class="row"><span class="lbl">Evidence</span>'
                f'<table class="evidence">{rows}</table></div>'
            )
        if f.get("fix"):
            parts.append(
                f'<div class="row fix"><span class="lbl">Fix</span>{html.escape(evidence.short_paths(f["fix"]))}</div>'
            )
        if f.get("why"):
            parts.append(
                f'<div class="row"><span class="lbl">Why</span>{html.escape(evidence.short_paths(f["why"]))}</div>'
            )
        parts.append("</div>")
        out.append("".join(parts))
    return "\n".join(out)


def _loaders(report) -> str:
    if not report.loaders:
        return ""
    shown, rest = loader_table.pick(report.loaders, report.findings, loader_table.MAX_SHOWN_HTML)
    head = "".join(f"<th>{html.escape(loader_label(ld))}</th>" for ld in shown)
    rows = []
    for header, key, spec in _LOADER_COLUMNS[1:]:
        cells = []
        for ld in shown:
            value = tuple(ld.get(k) for k in key) if isinstance(key, tuple) else ld.get(key)
            cells.append(f"<td>{html.escape(_fmt(value, spec))}</td>")
        rows.append(f"<tr><th>{html.escape(header)}</th>{''.join(cells)}</tr>")
    more = f'<p class="more">{html.escape(rest)}</p>' if rest else ""
    return (
        '<h2>DataLoaders</h2><table class="loaders"><tr><th></th>'
        f"{head}</tr>{''.join(rows)}</table>{more}"
    )


def _hang(report) -> str:
    hang = report.hang
    if not hang:
        return ""
    snap = hang.get("snapshot") or {}
    out = [
        '<h2>Hang</h2><div class="hang">',
        f"<p><b>{html.escape(str(hang.get('summary') or 'no batch for the hang timeout'))}</b>",
    ]
    if snap.get("stalled_s") is not None:
        out.append(
            f" — no batch for {_num(snap['stalled_s'])} s "
            f"(timeout {_num(hang.get('timeout_s') or snap.get('timeout_s'))} s)"
        )
    out.append("</p>")
    who = _HangNames(report)
    for line in who.waits:
        out.append(f'<p class="waits">{html.escape(line)}</p>')
    procs = list(snap.get("processes") or [])
    # The stuck rank first, then workers before main processes, blocked before running.
    procs.sort(
        key=lambda p: (
            who.stuck_rank is not None and who.rank_of(p) != who.stuck_rank,
            _worker_id(p) < 0,
            p.get("state") == "R",
        )
    )
    for p in procs:
        out.append(_process_capture(p, who))
    out.append("</div>")
    return "".join(out)


class _HangNames:
    """How the hang section names a captured process, as the terminal names loaders: "rank 1
    \u00b7 loader 1 worker 0", "rank 0 \u00b7 main process"; and the ranks the hang findings
    say wait for the stuck one (worker_hang's waiting_ranks and waiting_rank_frames)."""

    def __init__(self, report):
        self.labels = loader_labels(report.loaders)
        self.main_rank = {}
        self.loader_rank = {}
        for ld in report.loaders or []:
            rank = ld.get("rank", ld.get("local_rank"))
            if isinstance(rank, int):
                self.loader_rank[ld.get("id", ld.get("loader"))] = rank
                if ld.get("main_pid"):
                    self.main_rank[ld["main_pid"]] = rank
        self.stuck_rank = None
        self.waiting = {}  # waiting rank -> the stuck rank's loader, as labelled
        self.waits = []
        for f in report.findings or []:
            ev = f.get("evidence") or {}
            if f.get("severity") != "critical" or not ev.get("waiting_ranks"):
                continue
            stuck = self.labels.get(f.get("loader")) or (
                f"rank {f['rank']}" if f.get("rank") is not None else "the stuck rank"
            )
            if self.stuck_rank is None and f.get("rank") is not None:
                self.stuck_rank = int(f["rank"])
            ranks = [int(r) for r in str(ev["waiting_ranks"]).split(",") if r.strip().isdigit()]
            for r in ranks:
                self.waiting.setdefault(r, stuck)
            frames = ev.get("waiting_rank_frames") or ", ".join(f"rank {r}" for r in ranks)
            self.waits.append(f"{stuck} stopped; waiting for it: {frames}")

    def rank_of(self, p: dict):
        if _worker_id(p) >= 0:
            return self.loader_rank.get(p.get("loader"))
        return self.main_rank.get(p.get("pid"))

    def name(self, p: dict) -> str:
        if _worker_id(p) >= 0:
            loader = self.labels.get(p.get("loader")) or f"loader {p.get('loader')}"
            return f"{loader} worker {p['worker']}"
        rank = self.main_rank.get(p.get("pid"))
        if rank is None:
            return "main process"
        name = f"rank {rank} \u00b7 main process"
        if rank in self.waiting:
            name += f", waiting for {self.waiting[rank]}"
        return name


def _worker_id(p: dict) -> int:
    w = p.get("worker")
    return w if isinstance(w, int) else -1


def _process_capture(p: dict, who: _HangNames) -> str:
    facts = [f"pid {p.get('pid')}"]
    for key, label in (("state", "state"), ("wchan", "wchan"), ("syscall", "syscall")):
        if p.get(key):
            facts.append(f"{label} {p[key]}")
    if p.get("io_target"):
        facts.append(f"blocked on {p['io_target']}")
    if p.get("exit_signal") is not None or p.get("exit_code") is not None:
        facts.append(f"exit code {p.get('exit_code')}, signal {p.get('exit_signal')}")
    head = f"<h3>{html.escape(who.name(p))} <span class='sev'>{html.escape(', '.join(facts))}</span></h3>"
    stacks = p.get("stacks") or []
    body = []
    for th in stacks:
        frames = th.get("frames") or []
        label = f"thread {th.get('thread_id')}" + (" (current)" if th.get("current") else "")
        lines = [label + ", most recent call first:"]
        for fr in frames:
            lines.append(
                f'  File "{fr.get("file")}", line {fr.get("line")}, in {fr.get("function")}'
            )
            if fr.get("code"):
                lines.append(f"    {fr['code']}")
        body.append(f'<pre class="stack">{html.escape(chr(10).join(lines))}</pre>')
    if not body and p.get("raw_stack"):
        body.append(f'<pre class="stack">{html.escape(p["raw_stack"])}</pre>')
    if not body:
        note = p.get("stack_note") or "no Python stack was captured"
        body.append(f'<p class="note">{html.escape(note)}</p>')
    return f'<div class="capture">{head}{"".join(body)}</div>'


# -- charts ----------------------------------------------------------------------------------


def _has(values) -> bool:
    return any(v is not None for v in values or [])


def _proc_label(p: dict) -> str:
    if p.get("role") == "main":
        pids = p.get("pids") or []
        return f"main (pid {pids[0]})" if pids else "main"
    return f"loader {p.get('loader')} worker {p.get('worker')}"


def _layout(fig, title: str, y_title: str, height: int = 300, **kw) -> None:
    fig.update_layout(
        title={"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        height=height,
        margin={"l": 60, "r": 20, "t": 40, "b": 45},
        xaxis_title=X_TITLE,
        yaxis_title=y_title,
        template="plotly_white",
        legend={"orientation": "h", "y": -0.25},
        hovermode="x unified",
        yaxis_rangemode="tozero",  # a rate or a share read against its zero, not magnified
        **kw,
    )


def _charts(report, go) -> list[tuple[str, list]]:
    s = report.series or {}
    t = s.get("t_s") or []
    if not t:
        return []
    sections: list[tuple[str, list]] = []
    line = {"mode": "lines", "line": {"width": 1.6}}
    labels = loader_labels(report.loaders)

    loop = []
    loaders = [ld for ld in s.get("loaders") or [] if _has(ld.get("batches_per_s"))]
    first_batch = first_batch_s(t, loaders)
    if loaders:
        fig = go.Figure()
        for ld in loaders:
            fig.add_trace(
                go.Scatter(
                    x=t,
                    y=ld["batches_per_s"],
                    name=labels.get(ld["loader"], f"loader {ld['loader']}"),
                    **line,
                )
            )
        _layout(fig, "Batches per second (handed to the training loop)", "batches/s")
        _mark_start(fig, t, first_batch)
        loop.append(("chart-batches", "batches/s", fig, None))
    stalls = [ld for ld in s.get("loaders") or [] if _has(ld.get("data_stall_pct"))]
    if stalls:
        fig = go.Figure()
        for ld in stalls:
            fig.add_trace(
                go.Scatter(
                    x=t,
                    y=ld["data_stall_pct"],
                    name=labels.get(ld["loader"], f"loader {ld['loader']}"),
                    **line,
                )
            )
        _layout(
            fig,
            "Data stall: share of the loop the main process waits for a batch",
            "%",
            yaxis_range=[0, 100],
        )
        _mark_start(fig, t, first_batch)
        loop.append(
            (
                "chart-stall",
                "data stall",
                fig,
                "Below ~5% the loader keeps up; the training step is the limit.",
            )
        )
    gpu_chart = _gpu_chart(go, t, s.get("gpus") or [], stalls, line)
    if gpu_chart:
        loop.append(gpu_chart)
    if loop:
        sections.append(("The training loop", loop))

    procs = s.get("processes") or []
    workers = [p for p in procs if p.get("role") == "worker"]
    ordered = workers + [p for p in procs if p.get("role") == "main"]
    per_worker = []
    cpu = [p for p in ordered if _has(p.get("cpu_pct"))]
    if cpu:
        fig = go.Figure()
        for p in cpu:
            fig.add_trace(go.Scatter(x=t, y=p["cpu_pct"], name=_proc_label(p), **line))
        _layout(fig, "CPU per process (% of one core)", "% of a core")
        per_worker.append(("chart-cpu", "cpu", fig, None))
    states = [p for p in ordered if (p.get("state") or "").strip()]
    if states:
        legend = " ".join(
            f'<span class="swatch" style="background:{color}"></span>{letter} {name}'
            for letter, name, color in STATES[:5]
        )
        per_worker.append(
            (
                "chart-state",
                "state",
                _state_heatmap(go, t, states),
                f"{legend}<br>A worker that should be computing but sleeps is waiting "
                "on something: storage, a lock, the queue.",
            )
        )
    runq = [p for p in ordered if _has(p.get("runq_delay_pct"))]
    if runq:
        fig = go.Figure()
        for p in runq:
            fig.add_trace(go.Scatter(x=t, y=p["runq_delay_pct"], name=_proc_label(p), **line))
        _layout(fig, "Run-queue delay: time runnable but waiting for a CPU", "% of wall time")
        per_worker.append(
            (
                "chart-runq",
                "run-queue delay",
                fig,
                "High delay with many workers means they queue for too few cores.",
            )
        )
    getitem = [p for p in ordered if _has(p.get("getitem_ms"))]
    if getitem:
        fig = go.Figure()
        for p in getitem:
            fig.add_trace(
                go.Scatter(
                    x=t,
                    y=p["getitem_ms"],
                    name=_proc_label(p),
                    mode="lines+markers",
                    marker={"size": 4},
                    connectgaps=True,
                )
            )
        _layout(fig, "__getitem__ time per sample over the run", "ms per sample")
        per_worker.append(("chart-getitem-time", "getitem over time", fig, None))
    if per_worker:
        sections.append(("Workers", per_worker))

    dist = []
    for key, chart_id, name, title, unit, note in (
        (
            "getitem_ms_sample",
            "chart-getitem-dist",
            "getitem distribution",
            "__getitem__ per sample, by worker",
            "ms per sample",
            "A uniform sample of each worker's batches; one worker far above the "
            "others is a straggler.",
        ),
        (
            "collate_ms_sample",
            "chart-collate-dist",
            "collate distribution",
            "collate_fn per batch, by worker",
            "ms per batch",
            None,
        ),
    ):
        boxes = [p for p in ordered if p.get(key)]
        if not boxes:
            continue
        fig = go.Figure()
        for p in boxes:
            fig.add_trace(go.Box(y=p[key], name=_proc_label(p), boxpoints="outliers"))
        _layout(fig, title, unit, showlegend=False)
        fig.update_layout(xaxis_title=None, hovermode="closest")
        dist.append((chart_id, name, fig, note))
    if dist:
        sections.append(("Where the fetch time goes", dist))

    m = s.get("machine") or {}
    machine = []
    shm = m.get("shm_used_bytes")
    if _has(shm):
        total = m.get("shm_total_bytes") or (report.system or {}).get("shm_total_bytes")
        fig, note = _shm_chart(go, t, shm, total, line)
        machine.append(("chart-shm", "shm", fig, note))
    mem = m.get("mem_available_bytes")
    if _has(mem):
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=t, y=[_gib(v) for v in mem], name="available", **line))
        _layout(fig, "Available memory (MemAvailable)", "GiB")
        machine.append(("chart-mem", "memory", fig, None))
    gpu_mem = [g for g in s.get("gpus") or [] if _has(g.get("memory_used_bytes"))]
    if gpu_mem:
        fig = go.Figure()
        for g in gpu_mem:
            fig.add_trace(
                go.Scatter(
                    x=t,
                    y=[_gib(v) for v in g["memory_used_bytes"]],
                    name=f"GPU {g['index']}: used",
                    **line,
                )
            )
            if g.get("job") and _has(g.get("job_memory_bytes")):
                fig.add_trace(
                    go.Scatter(
                        x=t,
                        y=[_gib(v) for v in g["job_memory_bytes"]],
                        name=f"GPU {g['index']}: the job's processes",
                        mode="lines",
                        line={"width": 1.2, "dash": "dot"},
                    )
                )
            if g.get("memory_total_bytes"):
                fig.add_trace(
                    go.Scatter(
                        x=[t[0], t[-1]],
                        y=[_gib(g["memory_total_bytes"])] * 2,
                        name=f"GPU {g['index']}: size",
                        mode="lines",
                        line={"dash": "dash", "color": "#c62828"},
                    )
                )
        _layout(fig, "GPU memory (NVML): used against the device's size", "GiB")
        machine.append(
            (
                "chart-gpu-memory",
                "gpu memory",
                fig,
                "NVML's figure: the device's memory in use, the CUDA context and torch's cached "
                "blocks included (more than torch.cuda.memory_allocated).",
            )
        )
    reads = m.get("read_mb_per_s")
    if _has(reads):
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=t, y=reads, name="from storage (read_bytes)", **line))
        if _has(m.get("rchar_mb_per_s")):
            fig.add_trace(
                go.Scatter(
                    x=t,
                    y=m["rchar_mb_per_s"],
                    name="all reads, page cache included (rchar)",
                    mode="lines",
                    line={"width": 1.2, "dash": "dot"},
                )
            )
        _layout(fig, "Reads of the job's processes", "MB/s")
        machine.append(("chart-reads", "reads", fig, None))
    busy = m.get("cpu_busy_pct")
    if _has(busy):
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=t, y=busy, name="busy", **line))
        _layout(fig, "Machine CPU busy (% of all CPUs)", "%", yaxis_range=[0, 100])
        machine.append(("chart-machine-cpu", "machine cpu", fig, None))
    if machine:
        sections.append(("The machine", machine))
    return sections


def first_batch_s(t: list, loaders: list) -> float | None:
    """When the first batch reached the loop: the first sample time with batches handed out,
    over all loaders (None when none was)."""
    for i, ts in enumerate(t):
        if any((ld["batches_per_s"][i] or 0) > 0 for ld in loaders if i < len(ld["batches_per_s"])):
            return ts
    return None


def _mark_start(fig, t: list, first: float | None) -> None:
    """Shades the seconds before the first batch and says what they were, so an empty start
    of the loop charts reads as the job starting, not as missing data."""
    if not t or first is None or first - t[0] < START_MARK_MIN_S:
        return
    fig.add_vrect(x0=t[0], x1=first, fillcolor="#9e9e9e", opacity=0.12, line_width=0)
    fig.add_annotation(
        x=(t[0] + first) / 2,
        y=1,
        yref="paper",
        yanchor="top",
        showarrow=False,
        text=f"starting: imports, workers spawning<br>first batch at {first:.1f} s",
        font={"size": 11, "color": "#555"},
    )


def _shm_chart(go, t: list, shm: list, total, line: dict):
    """/dev/shm used against its size; when the use is too small to see against the size, on
    its own scale, the size said in words. The figure and its note (this module's HTML)."""
    used = [_mib(v) for v in shm]
    peak = max((v for v in shm if v is not None), default=0)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=t, y=used, name="used", fill="tozeroy", **line))
    note = "Batches from workers pass through /dev/shm; at its size they fail (SIGBUS)."
    if total and peak >= SHM_OWN_SCALE_BELOW * total:
        fig.add_trace(
            go.Scatter(
                x=[t[0], t[-1]],
                y=[_mib(total)] * 2,
                name="size",
                mode="lines",
                line={"dash": "dash", "color": "#c62828"},
            )
        )
        _layout(fig, "Shared memory (/dev/shm): used against its size", "MiB")
        return fig, note
    top = max(_mib(peak) * 1.25, 1.0)  # at least 1 MiB tall: an idle /dev/shm reads as idle
    size = f"{_gib(total):.2f} GiB" if total else "unknown"
    _layout(
        fig,
        f"Shared memory (/dev/shm) used, on its own scale (size {size})",
        "MiB",
        yaxis_range=[0, top],
    )
    if total:
        share = 100.0 * peak / total
        note = (
            f"The used line has a scale of its own: its peak, {_mib(peak):.1f} MiB, is "
            f"{share:.2g}% of the {size} size, a flat line against it. " + note
        )
    return fig, note


def _gpu_chart(go, t, gpus: list, stalls: list, line: dict):
    """The job's GPUs' utilization beside the loaders' data stall, on one 0-100 % axis."""
    gpus = [g for g in gpus if _has(g.get("utilization_pct"))]
    if not gpus:
        return None
    fig = go.Figure()
    for g in sorted(gpus, key=lambda g: not g.get("job")):
        own = bool(g.get("job"))
        fig.add_trace(
            go.Scatter(
                x=t,
                y=g["utilization_pct"],
                name=f"GPU {g['index']}: a kernel running" + ("" if own else " (not the job's)"),
                mode="lines",
                line={"width": 1.8 if own else 1.0, "dash": "solid" if own else "dot"},
            )
        )
    for ld in stalls:
        fig.add_trace(
            go.Scatter(
                x=t,
                y=ld["data_stall_pct"],
                name=f"loader {ld['loader']}: data stall",
                mode="lines",
                line={"width": 1.2, "dash": "dash"},
            )
        )
    _layout(
        fig,
        "GPU beside the data stall: time a kernel ran, time the loop waited for batches",
        "%",
        yaxis_range=[0, 100],
    )
    return (
        "chart-gpu",
        "gpu",
        fig,
        "NVML's utilization is the share of time at least one kernel was running on the GPU, "
        "not how busy it was: a small kernel running all the time reads 100%. A GPU that "
        "idles while the data stall is high is starved by the input pipeline.",
    )


def _state_heatmap(go, t, procs):
    codes = {letter: i for i, (letter, _, _) in enumerate(STATES)}
    z, text = [], []
    for p in procs:
        st = (p.get("state") or "").ljust(len(t))[: len(t)]
        z.append([None if c == " " else codes.get(c, codes["?"]) for c in st])
        text.append(
            [
                dict((s[0], s[1]) for s in STATES).get(c, c) if c != " " else "not sampled"
                for c in st
            ]
        )
    n = len(STATES)
    # A stepwise colorscale: one flat band per state code.
    scale = []
    for i, (_, _, color) in enumerate(STATES):
        scale.append([i / n, color])
        scale.append([(i + 1) / n, color])
    fig = go.Figure(
        go.Heatmap(
            x=t,
            y=[_proc_label(p) for p in procs],
            z=z,
            text=text,
            zmin=-0.5,
            zmax=n - 0.5,
            colorscale=scale,
            hovertemplate="%{y}<br>%{x:.1f} s: %{text}<extra></extra>",
            showscale=False,  # the legend is the note under the chart: a colorbar of 6 bands is unreadable
            xgap=0,
            ygap=2,
        )
    )
    _layout(
        fig,
        "Process state (R running, S sleeping, D waiting on I/O)",
        "",
        height=120 + 28 * len(procs),
    )
    fig.update_layout(hovermode="closest")
    return fig


def _missing_series(report) -> list[str]:
    s = report.series or {}
    if not s.get("t_s"):
        return []
    m = s.get("machine") or {}
    out = []
    for key, label in (
        ("shm_used_bytes", "/dev/shm use"),
        ("mem_available_bytes", "available memory"),
        ("read_mb_per_s", "storage reads (/proc/<pid>/io)"),
    ):
        if not _has(m.get(key)):
            out.append(label)
    if not any(_has(p.get("runq_delay_pct")) for p in s.get("processes") or []):
        out.append("run-queue delay (/proc/<pid>/schedstat)")
    if not any(_has(g.get("utilization_pct")) for g in s.get("gpus") or []):
        why = s.get("gpu_not_measured")
        out.append(f"GPU ({why})" if why else "GPU utilization")
    return out


def _mib(v):
    return None if v is None else v / 2**20


def _gib(v):
    return None if v is None else v / 2**30


def _num(v) -> str:
    if v is None:
        return "?"
    if isinstance(v, float) and math.isfinite(v):
        return f"{v:.3g}" if v < 1000 else f"{v:,.0f}"
    return str(v)


_CSS = """
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       margin: 0 auto; max-width: 1100px; padding: 16px 24px 48px; color: #1d1d1f; }
h1 { font-size: 22px; margin: 0 0 6px; }
h2 { font-size: 17px; margin: 28px 0 10px; border-bottom: 1px solid #e0e0e0; padding-bottom: 4px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
.verdict { font-size: 18px; padding: 8px 12px; border-radius: 6px; display: inline-block; }
.verdict.bad { background: #fdecea; color: #b71c1c; }
.verdict.healthy { background: #e8f5e9; color: #1b5e20; }
.verdict.unknown { background: #f1f1f1; color: #333; }
.sub { color: #666; margin-top: 6px; }
.notes { color: #666; }
.finding { border-left: 4px solid; background: #fafafa; padding: 10px 14px; margin: 10px 0;
           border-radius: 4px; }
.fid { font-weight: 600; font-size: 15px; margin-bottom: 6px; }
.sev { font-weight: normal; color: #777; font-size: 13px; }
.row { margin: 4px 0; display: flex; }
.lbl { font-weight: 600; min-width: 86px; display: inline-block; flex: none; }
.fix { color: #1b5e20; }
table.evidence td { padding: 1px 12px 1px 0; font-family: ui-monospace, Menlo, monospace;
                    font-size: 12.5px; }
table.evidence td:first-child { white-space: nowrap; }
table.evidence th { text-align: left; font-weight: 600; color: #555; font-size: 12px;
                    padding: 6px 0 1px; }
table.evidence td.differ { font-family: inherit; font-style: italic; color: #555;
                           white-space: normal;
                           padding-top: 6px; max-width: 60em; }
table.loaders { border-collapse: collapse; }
table.loaders th, table.loaders td { padding: 3px 12px; border-bottom: 1px solid #eee;
                                     text-align: right; }
table.loaders th:first-child { text-align: left; font-weight: 600; }
.chart { margin: 8px 0 18px; }
.note { color: #666; font-size: 12.5px; margin: 2px 0 0; }
.swatch { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 10px;
          border-radius: 2px; vertical-align: baseline; }
pre.stack { background: #272822; color: #f8f8f2; padding: 10px; border-radius: 4px;
            overflow-x: auto; font-size: 12px; }
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style>
<script type="text/javascript">{plotly_js}</script>
</head>
<body>
{body}
</body>
</html>
"""
