"""Base models (Hub id, local directory or the locally built tiny model) and their adapters."""
