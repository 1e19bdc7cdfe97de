"""Machine facts for Python callers: the C++ readers (`_ext.collect_facts`) plus what only
Python can tell: the torch installed, its sharing strategy, CUDA devices and their free memory.

Importing torch costs 1.5-2 s on a small machine, more than `dldoctor check` may take in all,
so torch is imported only when that can pay off: an NVIDIA (or ROCm) driver is present and
the installed torch is not a CPU-only build. Otherwise its version comes from package
metadata and its sharing strategy is its documented default.
"""

from __future__ import annotations

import os
import platform
import sys

# torch's default on Linux (torch.multiprocessing): each shared tensor travels as an open fd.
TORCH_DEFAULT_SHARING_STRATEGY = "file_descriptor"

# Device nodes of a GPU driver: without one, CUDA (or ROCm) cannot be available and importing
# torch to ask would only cost time.
_GPU_DRIVER_PATHS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd")


def collect(shm_path: str = "/dev/shm", cuda: str = "auto", **roots: str) -> dict:
    """Every fact: the C++ machine facts (`roots` go to `_ext.collect_facts`) with `python`,
    `torch` and `cuda` added. `cuda`: "auto" (probe when worthwhile, see module doc) or "never"."""
    try:
        from .. import _ext
    except ImportError as e:
        from ..errors import DldoctorError

        raise DldoctorError(
            f"dldoctor's C++ extension is missing ({e}): reinstall with pip install dldoctor "
            "(or tools/install in a checkout)"
        ) from None
    facts = dict(_ext.collect_facts(shm_path=shm_path, **roots))
    facts["python"] = {"version": platform.python_version(), "executable": sys.executable}
    facts["torch"] = torch_facts()
    facts["cuda"] = cuda_facts(cuda, facts["torch"])
    return facts


def torch_facts() -> dict:
    """The installed torch without importing it (unless something already did)."""
    out = {"installed": False, "version": None, "imported": "torch" in sys.modules}
    out.update(sharing_strategy=None, sharing_strategy_source="")
    if out["imported"]:
        torch = sys.modules["torch"]
        out.update(installed=True, version=getattr(torch, "__version__", None))
        try:
            out["sharing_strategy"] = torch.multiprocessing.get_sharing_strategy()
            out["sharing_strategy_source"] = "this process"
        except Exception:  # a half-imported or unusual torch: leave it unknown
            pass
        return out
    import importlib.metadata
    import importlib.util

    try:
        if importlib.util.find_spec("torch") is None:
            return out
    except (ImportError, ValueError):
        return out
    out["installed"] = True
    try:
        out["version"] = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # a source checkout on sys.path
        pass
    if sys.platform.startswith("linux"):
        out["sharing_strategy"] = TORCH_DEFAULT_SHARING_STRATEGY
        out["sharing_strategy_source"] = "torch's default on Linux, unless the script changes it"
    return out


def cuda_facts(mode: str, torch_info: dict) -> dict:
    """CUDA devices with their total and free memory, or why they were not probed."""
    out: dict = {"probed": False, "reason": "", "devices": []}
    if mode == "never" and "torch" not in sys.modules:
        out["reason"] = "not probed (--no-cuda)"
        return out
    if not torch_info.get("installed"):
        out["reason"] = "torch is not installed"
        return out
    if "torch" not in sys.modules:
        if not any(os.path.exists(p) for p in _GPU_DRIVER_PATHS):
            out["reason"] = "no GPU driver on this machine"
            return out
        if "+cpu" in (torch_info.get("version") or ""):
            out["reason"] = f"torch {torch_info['version']} is a CPU-only build"
            return out
    try:
        import torch

        out["probed"] = True
        if not torch.cuda.is_available():
            out["reason"] = "torch.cuda.is_available() is False"
            return out
        for i in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(i)
            name = torch.cuda.get_device_properties(i).name
            out["devices"].append(
                {"index": i, "name": name, "total_bytes": int(total), "free_bytes": int(free)}
            )
    except Exception as e:  # a broken driver or torch: the check says so, it does not crash
        first_line = (str(e).splitlines() or [""])[0]
        out["reason"] = f"CUDA could not be queried: {type(e).__name__}: {first_line}"
    return out
