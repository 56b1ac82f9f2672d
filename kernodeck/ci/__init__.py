"""Running on CI engines: the GitHub Actions matrix and the GitLab / Slurm engines."""
