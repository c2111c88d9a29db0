"""Hydra sweeper that runs a multirun as one forge-ml round on Ray Tune.

    forge-ml train -m hydra/sweeper=tune 'lora.r=choice(8,16)' 'training.learning_rate=tag(log, interval(1e-4,1e-2))'

Sweep expressions form the search space, plain overrides are fixed for every trial; the
round engine samples (Optuna TPE), prunes (ASHA) and records (nested MLflow runs) exactly as
`forge-ml tune` does, and the sweep returns Hydra's usual list of job returns.
"""
