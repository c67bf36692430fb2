"""Orchestrators: read a Kubernetes or Slurm cluster as a fleet, and write a plan for them."""
