"""`dldoctor tune [--budget S] [--json F] -- COMMAND`: find the DataLoader settings under which
the job's training loop gets the most batches per second, by running it.

The first run (the job's own settings, watched as `dldoctor run` watches it) is the
diagnosis and the baseline; each next trial is chosen in the core (analyze/tune) from what
the runs so far measured, and run with its settings overridden as `dldoctor run --set` does.
"""

from __future__ import annotations

import json
import time

from ..errors import DldoctorError

DEFAULT_BUDGET_S = 180.0
DIAGNOSTIC_MIN_S = 8.0  # the diagnosis needs a steady stretch of the loop, not only a rate
TRIAL_MAX_S = 20.0  # a trial's measuring time at most (after its first batch)
START_ALLOWANCE_S = 6.0  # a trial's start-up (interpreter, torch, the dataset) before batches

HELP = (
    "run the job repeatedly with DataLoader settings overridden and report the fastest "
    "(batches/s handed to the training loop). Each trial runs the job's own code: its side "
    "effects (checkpoints, logs, writes) happen in every trial."
)


class Command:
    help = HELP

    def prepare_parser(self, parser) -> None:
        parser.description = HELP
        parser.add_argument(
            "--budget",
            metavar="S",
            type=float,
            default=DEFAULT_BUDGET_S,
            help=f"seconds for the whole search, the diagnostic run included (default {DEFAULT_BUDGET_S:.0f})",
        )
        parser.add_argument(
            "--json", metavar="F", help='write the result as JSON ("kind": "tune") to F'
        )
        parser.add_argument("cmd", nargs="*", metavar="-- COMMAND", help="the job to tune")

    def run(self, args) -> int:
        cmd = list(args.cmd)
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            raise DldoctorError("no command given: dldoctor tune [--budget S] -- python train.py")
        if not args.budget or not args.budget > 2 * START_ALLOWANCE_S:
            raise DldoctorError(
                f"--budget must be more than {2 * START_ALLOWANCE_S:.0f} seconds, not {args.budget}"
            )
        result = tune(cmd, args.budget)
        print_result(result)
        if args.json:
            try:
                with open(args.json, "w", encoding="utf-8") as f:
                    f.write(json.dumps(result, indent=2) + "\n")
            except OSError as e:
                raise DldoctorError(f"cannot write {args.json}: {e.strerror}") from None
        return 0 if result["baseline"]["batches_per_s"] is not None else 1


def tune(cmd: list[str], budget_s: float) -> dict:
    from .. import _ext
    from ..watcher import tune_trials as tt

    t0 = time.monotonic()
    tt.progress(f"trial 1: the job's own settings (the diagnosis), budget {budget_s:.0f} s")
    base = tt.run_trial(
        cmd,
        {},
        max_s=max(DIAGNOSTIC_MIN_S, min(TRIAL_MAX_S, budget_s / 4)),
        min_s=DIAGNOSTIC_MIN_S,
        diagnostic=True,
    )
    _said(tt, base)
    trials = [base]
    prof = tt.profile(base.report, base) if base.report is not None else {}
    while True:
        left = budget_s - (time.monotonic() - t0)
        if left < START_ALLOWANCE_S + tt.MIN_S:
            break
        nxt = _ext.tune_next(prof, [t.to_dict() for t in trials])
        if nxt is None:
            break
        tt.progress(f"trial {len(trials) + 1}: {_kwargs(nxt) or 'the job own settings'}")
        t = tt.run_trial(cmd, {"*": nxt}, max_s=min(TRIAL_MAX_S, left - START_ALLOWANCE_S))
        _said(tt, t)
        trials.append(t)
    return result_dict(prof, trials, time.monotonic() - t0, base.report)


def _said(tt, t) -> None:
    if t.outcome == "ok":
        tt.progress(f"  {t.batches_per_s:.1f} ± {t.ci:.1f} batches/s ({t.seconds:.1f} s)")
    else:
        tt.progress(f"  failed: {t.reason} ({t.seconds:.1f} s)")


def result_dict(prof: dict, trials: list, seconds: float, report) -> dict:
    from .. import _ext
    from ..job import settings as _settings

    base = trials[0]
    rows = [t.to_dict() for t in trials]
    best_i = _ext.tune_best(rows)
    out = {
        "schema": 1,
        "kind": "tune",
        "baseline": {
            "settings": _ext.tune_effective(prof, {}) if prof else {},
            "batches_per_s": base.batches_per_s,
            "ci": base.ci,
            "seconds": round(base.seconds, 2),
            "outcome": base.outcome,
        },
        "trials": rows[1:],
        "seconds": round(seconds, 1),
        "verdict": report.verdict if report is not None else None,
    }
    if base.outcome != "ok":
        out["baseline"]["reason"] = base.reason
    if best_i is not None:
        best = trials[best_i]
        settings = _ext.tune_effective(prof, best.settings) if prof else dict(best.settings)
        changed = {k: v for k, v in settings.items() if out["baseline"]["settings"].get(k) != v}
        loader_ids = [lo.get("id") for lo in (report.loaders if report is not None else [])] or [1]
        out["best"] = {
            "loaders": [{"loader": i, "settings": settings} for i in loader_ids],
            "batches_per_s": best.batches_per_s,
            "changed": changed,
            "set": _settings.describe({"*": changed}) if changed else "",
        }
        if base.batches_per_s:
            out["speedup"] = round(best.batches_per_s / base.batches_per_s, 3)
        # The limits at the best trial: its rate, and its main process's CPU per batch.
        at_best = dict(prof, batches_per_s=best.batches_per_s)
        if best.main_cpu_cores:
            at_best["main_cpu_cores"] = best.main_cpu_cores
        ceiling = _ext.tune_ceiling(at_best) if prof else None
        if ceiling:
            out["ceiling"] = {
                "limit": ceiling["limit"],
                "batches_per_s": round(ceiling["batches_per_s"], 2),
                "percent": round(100 * best.batches_per_s / ceiling["batches_per_s"], 1),
            }
    return out


def _kwargs(settings: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items() if k != "worker_threads") + (
        f" (worker_threads={settings['worker_threads']})" if "worker_threads" in settings else ""
    )


def print_result(r: dict) -> None:
    def rate(t):
        if t.get("outcome") != "ok" or t.get("batches_per_s") is None:
            return "failed"
        return f"{t['batches_per_s']:.1f} ± {t['ci']:.1f}"

    lines = ["", "dldoctor tune: trials (batches/s handed to the training loop)"]
    base = r["baseline"]
    lines.append(f"  {'settings':<64} {'batches/s':>16} {'seconds':>8}")
    own = "the job's own: " + _kwargs(base["settings"])
    lines.append(f"  {own:<64} {rate(base):>16} {base.get('seconds', 0):>8.1f}")
    for t in r["trials"]:
        text = _kwargs(t["settings"]) or "the job's own"
        reason = f"  {t['reason']}" if t.get("reason") else ""
        lines.append(f"  {text:<64} {rate(t):>16} {t['seconds']:>8.1f}{reason}")
    best = r.get("best")
    if best is None:
        lines.append("no trial measured a throughput: nothing to recommend")
    elif not best["changed"]:
        lines.append(
            f"best: the job's own settings ({best['batches_per_s']:.1f} batches/s); no trial beat "
            "them by more than its own uncertainty"
        )
    else:
        lines.append(
            f"best: {_kwargs(best['changed'])}: {best['batches_per_s']:.1f} batches/s, "
            f"{r.get('speedup', 0):.2f}x the job's own settings"
        )
        kw = {k: v for k, v in best["changed"].items() if k != "worker_threads"}
        if kw:
            lines.append(
                "  in code:   DataLoader(..., "
                + ", ".join(f"{k}={v!r}" for k, v in kw.items())
                + ")"
            )
        if "worker_threads" in best["changed"]:
            n = best["changed"]["worker_threads"]
            lines.append(
                f"  in each worker: torch.set_num_threads({n}) in worker_init_fn "
                f"(and OMP_NUM_THREADS={n})"
            )
        lines.append(f"  or run:    dldoctor run {best['set']} -- COMMAND")
    c = r.get("ceiling")
    if c and best is not None:
        lines.append(
            f"ceiling: {c['percent']:.0f} % of this machine's ceiling for this loader "
            f"({c['batches_per_s']:.1f} batches/s, limited by {c['limit']})"
        )
    lines.append(f"searched for {r['seconds']:.0f} s, {len(r['trials']) + 1} runs of the job")
    print("\n".join(lines))
