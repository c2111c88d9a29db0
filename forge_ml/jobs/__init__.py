"""What the CLI commands run: each job takes a validated ForgeConfig."""
