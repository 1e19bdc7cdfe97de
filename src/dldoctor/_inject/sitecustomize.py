# dldoctor-inject-sitecustomize (marker: a chained lookup skips any file that carries it)
"""Injected by `dldoctor run` into every Python process of a watched job (first on PYTHONPATH).

It installs a tiny import hook that instruments torch.utils.data right after PyTorch loads
it, then runs the sitecustomize module this one shadows (Debian's, the user's), so nothing
the user had is lost. It costs tens of microseconds, imports nothing heavy, and never raises:
on any failure it disables itself and leaves one line in the run's side log.
"""


def _dldoctor_inject():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    marker = b"dldoctor-inject-sitecustomize"

    def note(error):
        run_dir = os.environ.get("DLDOCTOR_RUN_DIR")
        if not run_dir:
            return
        try:
            import json
            import time

            line = json.dumps(
                {
                    "type": "inject_error",
                    "pid": os.getpid(),
                    "t_ns": time.monotonic_ns(),
                    "error": error,
                }
            )
            fd = os.open(
                os.path.join(run_dir, f"side-{os.getpid()}.jsonl"),
                os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                0o600,
            )
            try:
                os.write(fd, (line + "\n").encode("utf-8", "replace"))
            finally:
                os.close(fd)
        except Exception:
            pass

    real_here = os.path.realpath(here)

    def same_dir(entry, target=None):
        try:
            return bool(entry) and os.path.realpath(entry) == (target or real_here)
        except Exception:
            return False

    # Our directory served its purpose (finding this file); the user's PYTHONPATH entries stay,
    # and PYTHONPATH itself is untouched so child processes are instrumented too.
    try:
        sys.path[:] = [
            p
            for p in sys.path
            if not (os.path.basename(p.rstrip("/")) == "_inject" and same_dir(p))
        ]
    except Exception:
        pass

    pkg_dir = os.path.dirname(here)  # the dldoctor package this file belongs to

    class DldoctorImportHook:
        """Instruments torch.utils.data.dataloader once it has executed; also makes this
        dldoctor importable in interpreters where it is not installed (spawned workers must
        be able to unpickle dldoctor.job.worker._WorkerInit)."""

        TARGET = "torch.utils.data.dataloader"

        def find_spec(self, fullname, path=None, target=None):
            if fullname != self.TARGET and fullname != "dldoctor":
                return None
            spec = None
            for finder in sys.meta_path:
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            if fullname == "dldoctor":
                if spec is None:
                    import importlib.util

                    spec = importlib.util.spec_from_file_location(
                        "dldoctor",
                        os.path.join(pkg_dir, "__init__.py"),
                        submodule_search_locations=[pkg_dir],
                    )
                return spec
            if spec is None or spec.loader is None:
                return spec
            exec_module = getattr(spec.loader, "exec_module", None)
            if exec_module is None:
                return spec

            def exec_and_patch(module):
                exec_module(module)  # the user's import: its errors are theirs, unchanged
                try:
                    from dldoctor.job import hooks

                    hooks.install()
                except Exception as e:
                    note(f"instrumenting torch failed: {type(e).__name__}: {e}")

            try:
                spec.loader.exec_module = exec_and_patch  # this module's own loader object
            except Exception as e:
                note(f"cannot hook {fullname}: {type(e).__name__}: {e}")
            return spec

    if os.environ.get("DLDOCTOR_RING"):
        try:
            sys.meta_path.insert(0, DldoctorImportHook())
        except Exception as e:
            note(f"cannot install the import hook: {type(e).__name__}: {e}")

    # Chain: run the sitecustomize we shadow, as `sitecustomize`, the way site.py would.
    try:
        from importlib.machinery import PathFinder

        paths = [p for p in sys.path if not same_dir(p)]
        for _ in range(8):  # skip other dldoctor copies (nested `dldoctor run`)
            spec = PathFinder.find_spec("sitecustomize", paths)
            if spec is None or not spec.origin or spec.loader is None:
                return
            try:
                with open(spec.origin, "rb") as f:
                    if marker in f.read(4096):
                        found = os.path.dirname(spec.origin)
                        paths = [p for p in paths if not same_dir(p, os.path.realpath(found))]
                        continue
            except OSError:
                pass
            break
        else:
            return
        import importlib.util

        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        try:
            spec.loader.exec_module(module)
        except Exception as err:  # what site.execsitecustomize prints for a broken one
            if sys.flags.verbose:
                sys.excepthook(*sys.exc_info())
            else:
                sys.stderr.write(
                    "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                    f"{err.__class__.__name__}: {err}\n"
                )
    except Exception as e:
        note(f"chaining to sitecustomize failed: {type(e).__name__}: {e}")


try:
    _dldoctor_inject()
except Exception:
    pass
del _dldoctor_inject
