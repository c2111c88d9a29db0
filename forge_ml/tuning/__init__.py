"""Rounds of parallel trials on Ray Tune: with trainables/ and cluster.py (Ray Jobs), all that touches Ray."""
