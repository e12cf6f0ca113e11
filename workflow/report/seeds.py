"""How many seeds a claim needs, from the spread a sweep measured (query seed_variance; the formulas are
workflow/report/power.py's): the report's section, and `rlsweep plan --detect DELTA`.

Per benchmark the variance of one run's accuracy is split into training randomness between seeds and the sampling
noise of k samples per problem; the smallest difference a comparison of n seeds per setting detects (80% power, 5%
level, two-sided t-test over seeds) and the seeds needed for a given difference follow, at the measured k and at
more samples per problem (which shrink only the sampling part).
"""

from __future__ import annotations

import math

from workflow.report import power
from workflow.report.tables import Cell, Section, Table, fmt

DETECT = (0.01, 0.02, 0.05)  # differences the report's table sizes seeds for (accuracy, absolute)
MORE_SAMPLES = (1, 2, 4, 8)  # k multiples `rlsweep plan --detect` sizes seeds for


def variances(rows: list[dict]) -> dict[str, power.Variance]:
    """Per benchmark, the pooled Variance of the seed_variance rows (benchmarks where no setting has two seeds:
    left out, nothing measures their spread)."""
    by_bench: dict[str, dict[str, list[dict]]] = {}
    for r in rows:
        by_bench.setdefault(r["benchmark"], {}).setdefault(r["label"], []).append(r)
    out = {}
    for bench, settings in sorted(by_bench.items()):
        if all(len(runs) < 2 for runs in settings.values()):
            continue
        k = min(r["k"] for runs in settings.values() for r in runs)
        out[bench] = power.estimate({s: [r["acc"] for r in runs] for s, runs in settings.items()},
                                    {s: [r["eval_var"] for r in runs] for s, runs in settings.items()}, k)
    return out


def _seeds(n: int | None) -> str:
    return "—" if n is None else str(n)


def _sd(variance: float) -> str:
    return fmt(math.sqrt(variance))


def section(rows: list[dict], paired: list[dict], seeds_per_setting: int) -> Section | None:
    """The report's section: per benchmark the measured spread, what the sweep's seeds can detect and the seeds
    each difference of DETECT needs; then each comparison with the baseline against what its seeds can detect."""
    found = variances(rows)
    if not found:
        return None
    spread = Table(["benchmark", "k", "sd over seeds (training)", "sd of sampling", f"detectable with "
                    f"{seeds_per_setting} seeds", *[f"seeds for {d:g}" for d in DETECT]])
    for bench, v in found.items():
        spread.rows.append([Cell(bench), Cell(str(v.k)), Cell(_sd(v.train)), Cell(_sd(v.eval)),
                            Cell(fmt(power.detectable(v.run_variance(), seeds_per_setting))),
                            *[Cell(_seeds(power.seeds_needed(d, v.run_variance()))) for d in DETECT]])
    spread.notes.append(
        "One run's accuracy varies between seeds by training randomness and by the sampling noise of k samples per "
        "problem (estimated from each final evaluation's per-problem accuracies, pooled over settings). Detectable: "
        "the smallest true difference of mean accuracy a two-sided t-test over seeds finds with 80% power at the 5% "
        "level (noncentral t; workflow/report/power.py). `rlsweep plan SWEEP --detect 0.01` sizes seeds and samples "
        "per problem for any difference.")
    tables = [spread]
    comparisons = [r for r in paired if r["versus"] == "baseline" and r["benchmark"] in found]
    if comparisons:
        claims = Table(["benchmark", "setting", "seeds", "difference", "detectable", "reading"])
        for r in comparisons:
            least = power.detectable(found[r["benchmark"]].run_variance(), r["n_seeds"])
            small = math.isnan(least) or abs(r["mean_diff"]) < least
            claims.rows.append([Cell(r["benchmark"]), Cell(r["label"]), Cell(str(r["n_seeds"])),
                                Cell(f"{r['mean_diff']:+.3f}"), Cell(fmt(least)),
                                Cell("below what these seeds detect" if small else "within reach",
                                     mark="" if small else "best")])
        claims.notes.append("Each comparison with the baseline (the Noise table): its observed difference against the "
                            "smallest difference its seeds detect with 80% power. Below it, a non-significant result "
                            "says little: more seeds (table above) would be needed to tell.")
        tables.append(claims)
    return Section("How many seeds a claim needs", "seeds", tables)


def plan_table(found: dict[str, power.Variance], delta: float) -> Table:
    """`rlsweep plan --detect DELTA`: per benchmark the seeds per setting needed at the measured k and at more
    samples per problem."""
    table = Table(["benchmark", "k", "sd seeds", "sd samples",
                   *[f"at {m}k" if m > 1 else "seeds at k" for m in MORE_SAMPLES]])
    for bench, v in found.items():
        table.rows.append([Cell(bench), Cell(str(v.k)), Cell(_sd(v.train)), Cell(_sd(v.eval)),
                           *[Cell(_seeds(power.seeds_needed(delta, v.run_variance(v.k * m)))) for m in MORE_SAMPLES]])
    return table
