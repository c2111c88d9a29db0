"""Rounds of parallel trials on Ray Tune: the only package (with trainables/) that touches Ray."""
