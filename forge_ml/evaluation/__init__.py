"""Evaluation: batched generation, scorers, and reports."""
