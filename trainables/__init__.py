"""Ray Tune trainables: a trial trains one config, reports metrics, checkpoints."""
