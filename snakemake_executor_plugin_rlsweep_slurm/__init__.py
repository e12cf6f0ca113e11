"""Snakemake finds executor plugins by module name (snakemake_executor_plugin_<name>), so this top-level package
only re-exports rlsweep's SLURM executor: `snakemake --executor rlsweep-slurm` (profiles/slurm sets it)."""

from workflow.slurm.executor import Executor, ExecutorSettings, common_settings

__all__ = ["Executor", "ExecutorSettings", "common_settings"]
