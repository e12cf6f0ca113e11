"""The report's Graders section: what the numbers look like under each grader that judged the sweep's responses
(eval.graders, `rlsweep rescore`), how often the graders disagree, a few responses they disagree on, and every
comparison whose winner changes with the grader, flagged. From the queries graders, grader_disagreement and
grader_examples (queries.sql)."""

from __future__ import annotations

from workflow.report.tables import Cell, Section, Table, fmt


def _by_benchmark(rows: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """benchmark -> setting -> grader -> mean accuracy over seeds."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r in rows:
        out.setdefault(r["benchmark"], {}).setdefault(r["label"], {})[r["grader"]] = r["mean"]
    return out


def flips(rows: list[dict], baseline: str | None) -> list[str]:
    """Comparisons that another grader would decide differently: the best setting of a benchmark, and each
    setting's difference to the baseline changing sign."""
    found = []
    for bench, settings in sorted(_by_benchmark(rows).items()):
        graders = sorted({g for per in settings.values() for g in per})
        if len(settings) > 1:
            best = {}
            for g in graders:
                scored = {label: per[g] for label, per in settings.items() if g in per}
                if len(scored) == len(settings):
                    top = max(scored.values())
                    best[g] = sorted(label for label, v in scored.items() if v == top)
            if len({tuple(v) for v in best.values()}) > 1:
                found.append(f"{bench}: the best setting changes with the grader: "
                             + "; ".join(f"{' = '.join(v)} under {g}" for g, v in best.items()) + ".")
        base = settings.get(baseline) if baseline else None
        for label, per in sorted(settings.items()):
            if base is None or label == baseline:
                continue
            diffs = {g: per[g] - base[g] for g in graders if g in per and g in base}
            if any(d > 0 for d in diffs.values()) and any(d < 0 for d in diffs.values()):
                found.append(f"{bench}: {label} − {baseline} changes sign with the grader: "
                             + ", ".join(f"{d:+.3f} under {g}" for g, d in diffs.items()) + ".")
    return found


def section(rows: list[dict], disagreement: list[dict], examples: list[dict], baseline: str | None) -> Section | None:
    """The Graders section, or None when no other grader judged the sweep's responses."""
    if not rows:
        return None
    own = {r["benchmark"]: r["grader"] for r in rows if r["own"]}
    graders = sorted({r["grader"] for r in rows}, key=lambda g: (g not in own.values(), g))
    accuracy = Table(["benchmark", "setting", *[f"{g} (own)" if g in own.values() else g for g in graders]])
    for bench, settings in sorted(_by_benchmark(rows).items()):
        for label, per in sorted(settings.items()):
            top, differ = max(per.values()), len(set(per.values())) > 1
            accuracy.rows.append([Cell(bench), Cell(label),
                                  *[Cell(fmt(per.get(g)), mark="best" if differ and per.get(g) == top else "")
                                    for g in graders]])
    accuracy.notes.append("avg@k of each setting's final evaluation (mean over seeds) as each grader judges the same "
                          "responses; (own): the grader that scored the benchmark when it was generated, whose "
                          "verdicts every other table uses. Bold: the grader that scores the setting highest.")
    changed = flips(rows, baseline)
    accuracy.notes += [f"⚠ {line}" for line in changed] or ["No comparison changes winner under another grader."]

    agree = Table(["benchmark", "grader", "versus", "samples", "disagree", "accuracy", "its own grader's",
                   "only it right", "only own right"])
    for r in disagreement:
        agree.rows.append([Cell(r["benchmark"]), Cell(r["grader"]), Cell(r["own_grader"]), Cell(str(r["samples"])),
                           Cell(f"{100 * r['disagree']:.2f}%"), Cell(fmt(r["acc"])), Cell(fmt(r["own_acc"])),
                           Cell(str(r["only_grader_right"])), Cell(str(r["only_own_right"]))])
    agree.notes.append("Every sample of the sweep's evaluations (all steps) the grader judged, against the verdict of "
                       "the benchmark's own grader on the same response.")
    tables = [accuracy, agree]
    if examples:
        shown = Table(["benchmark", "gold", "grader: extracted → verdict", "own: extracted → verdict",
                       "end of the response"])
        for r in examples:
            shown.rows.append([Cell(r["benchmark"]), Cell(str(r["gold"])),
                               Cell(f"{r['grader']}: {r['extracted']} → {'right' if r['correct'] else 'wrong'}"),
                               Cell(f"{r['own_grader']}: {r['own_extracted']} → "
                                    f"{'right' if r['own_correct'] else 'wrong'}"),
                               Cell(" ".join(str(r["response_end"] or "").split())[-120:],
                                    note=r["response_end"] or "")])
        shown.notes.append("Up to three disagreements per benchmark and grader (query grader_examples lists them).")
        tables.append(shown)
    return Section("Graders: the same responses, judged again", "graders", tables)
