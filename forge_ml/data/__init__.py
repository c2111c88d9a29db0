"""The data layer: JSONL chat examples, project datasets, tokenisation for SFT."""

from forge_ml.data.examples import Example, dataset_hash, normalize_text, read_examples
from forge_ml.data.project_data import ProjectData, load_project_data

__all__ = ["Example", "ProjectData", "dataset_hash", "load_project_data", "normalize_text", "read_examples"]
