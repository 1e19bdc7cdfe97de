"""dldoctor: finds why a PyTorch DataLoader is slow or stuck, and says how to fix it."""

__version__ = "0.1.0"

__all__ = ["__version__"]
