"""What keeps Snakemake's planning of a 10,000-run sweep (50,000 jobs) near bare Snakemake's time on the same DAG
shape (bench/plan_dag.py; docs/sweeps.md "Planning 10,000 runs"). The Snakefile applies each; they change how fast
Snakemake plans, never what it plans.

- `job_function`: Snakemake inspects the signature of an input or params function on every call (which of
  wildcards, input, threads, ... it takes); marked once instead, with its own hook.
- `cache_resource_signature`: the same inspection of Snakemake's own `Resource.evaluate`, a bound method made anew
  for each of a job's resources (runtime, GPUs, threads, ...): four signatures a job, ~5 s of a 10,000-run plan.
- `tune_gc`: garbage collection while the DAG is built (see its docstring).
- `forget_load_time_names`: the Snakefile's names that only loading needs, dropped once the rules are defined.
"""

from __future__ import annotations

import atexit
import gc
import inspect
from collections.abc import Iterable, MutableMapping, Set
from typing import Callable, TypeVar

from snakemake.common import get_function_params, overwrite_function_params
from snakemake.resources import Resource

F = TypeVar("F", bound=Callable)


def job_function(func: F) -> F:
    """Mark an input or params function that runs once per job: its signature is inspected here, once (Snakemake's
    own overwrite_function_params hook), not on every call (10,000 runs x 4 jobs x 2 functions)."""
    overwrite_function_params(func, inspect.signature(func).parameters)
    return func


def cache_resource_signature() -> None:
    """Give Resource.evaluate its signature once. Snakemake asks for it through get_function_params on every
    resource of every job; the hook's attribute, set on the function, is what a bound method of it reports. The
    signature is the same for every instance (*args, **kwargs), so what Snakemake does with it is unchanged."""
    probe = Resource("_probe", 1).evaluate
    overwrite_function_params(Resource.evaluate, inspect.signature(probe).parameters)
    assert get_function_params(probe) is get_function_params(Resource("_other", 2).evaluate)


def tune_gc() -> None:
    """Garbage collection while Snakemake builds the DAG of a big sweep: the sweep's runs (10,000 validated configs)
    live as long as this process, so they leave the collector's view (it walked all of them on every full
    collection); and Snakemake makes several objects per job, none of them garbage until it exits, so the youngest
    generation is collected every 50,000 new objects instead of every 700. Measured at 10,000 runs (50,000 jobs):
    collections took 9.3 s of 57 s before, with bare Snakemake's 6.3 s of 45 s. At exit they go back to the
    collector: objects frozen for good are never finalised, and triton's extension (which verl's import loads) then
    reported ~30 lines of "nanobind: leaked ..." at the end of every verl sweep's run. Call it after the sweep is
    loaded and the rules are defined."""
    gc.freeze()
    atexit.register(gc.unfreeze)
    gc.set_threshold(50_000, *gc.get_threshold()[1:])


def forget_load_time_names(namespace: MutableMapping[str, object], snakemake_names: Set[str],
                           names: Iterable[str]) -> None:
    """Drop `names` (those absent are skipped) from the Snakefile's namespace. Snakemake copies that whole namespace
    (Job.format_wildcards, then snakemake.utils.format) each time it formats a job's command, which a dry run does
    three times a job: each name costs ~0.08 us per formatting (measured at 217 against 279 names), so one that only
    loading needs (an import, a helper of the rules' definitions, a loop's variable) costs ~0.02 s of a 10,000-run
    plan's 70,000 jobs, and the ~50 such names of ours ~1 s. Give only names that no input, params or shell of a
    job reads when the job is planned or run (a running job evaluates its rule's `shell:` expression again): a job
    that reads a dropped name fails with a NameError. `snakemake_names`: the namespace's names before the Snakefile
    ran. It is the module namespace of snakemake.workflow, whose own code reads them (`sys`, ...): naming one is
    refused."""
    if own := sorted(set(names) & snakemake_names):
        raise ValueError(f"{', '.join(own)}: Snakemake's own names (a Snakefile runs in the namespace of its workflow "
                         "module, whose code reads them): never dropped")
    for name in names:
        namespace.pop(name, None)
