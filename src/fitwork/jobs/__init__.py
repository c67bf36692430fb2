"""Many pipelines, one fleet: the co-fit, the jobs file, running them together, simulation."""
