"""trainforge: one training pipeline for Jetson, workstations, DGX Spark, clusters and CPUs."""

__version__ = "0.1.0"
