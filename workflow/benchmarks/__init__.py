"""The benchmark floor: the catalogue (catalog.py), the generated tasks (arithmetic.py, word_problems.py), prompts,
answer extraction (answers.py), scoring and the graders (scoring.py, graders.py, math_equal.py, verify_worker.py)
and the avg@k / pass@k metrics (metrics.py). It imports nothing of the project above workflow.hub, so the config,
the data stage, the results and the engines can all read it; the evaluation jobs (workflow/eval/) sit above."""
