"""dldoctor: finds why a PyTorch DataLoader is slow or stuck, and says how to fix it.

with dldoctor.watch() as doc:
    train()
print(doc.report())

dldoctor.profile(loader, batches=200)
"""

__version__ = "0.1.0"


def __getattr__(name):
    # Lazy, so that `import dldoctor` (done by the injected sitecustomize in every process of
    # a watched job) costs nothing until the API is used.
    if name in ("watch", "profile"):
        from . import api as _api

        return getattr(_api, name)
    if name == "Report":
        from .report import Report

        return Report
    if name == "DldoctorError":
        from .errors import DldoctorError

        return DldoctorError
    raise AttributeError(f"module 'dldoctor' has no attribute {name!r}")


__all__ = ["__version__", "watch", "profile", "Report", "DldoctorError"]
