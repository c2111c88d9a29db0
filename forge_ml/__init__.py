"""forge-ml: self-improving fine-tuning of small language models."""

__version__ = "0.1.0"
