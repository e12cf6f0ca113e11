-- The queries behind every number of a sweep's report (`rlsweep report`), over the four tables of
-- `rlsweep query`. The copy in results/<sweep>/report/queries.sql is the one that ran, with the sweep's own
-- values filled in (its planned runs, the benchmark sets, Student's t quantiles, each run's running totals of
-- compute as `spent`): rerun any block with
--     rlsweep query "$$(sed -n '/-- name: accuracy/,/^;/p' results/<sweep>/report/queries.sql)" --sweep <sweep>
-- A block runs from its `-- name:` line to the `;` line that closes it.

-- name: runs
-- Each run the sweep plans, with its RL job's status, the steps it trained and the steps it was evaluated at, and
-- the GPU-hours SLURM accounted to its RL job and its eval jobs (sacct: each attempt's elapsed x allocated GPUs;
-- null off SLURM or without accounting). from_sweep / sft_from: the other sweep whose job computed the run's RL / SFT
-- stage, which this sweep reused from the shared store (null: computed by this sweep).
WITH planned AS ($planned)
SELECT p.label, p.method, p.seed, p.run_id, p.steps,
       coalesce(r.status, 'not started') AS status, r.error,
       CASE WHEN r.computed_by <> r.sweep THEN r.computed_by END AS from_sweep,
       (SELECT any_value(s.computed_by) FROM runs s WHERE s.stage = 'sft' AND s.run_id = r.parent_id
        AND s.computed_by <> s.sweep) AS sft_from,
       CASE WHEN EXISTS (SELECT 1 FROM runs s WHERE s.stage = 'sft' AND s.run_id = r.parent_id) THEN r.parent_id
       END AS sft_id,  -- (an RL run without SFT names its pretrained base as its parent, if it has one)
       r.gpu_hours AS rl_gpu_hours,
       (SELECT sum(e.gpu_hours) FROM runs e WHERE e.stage = 'eval' AND e.parent_id = p.run_id
        AND e.run_id = p.eval_id) AS eval_gpu_hours,
       (SELECT max(t.step) FROM train_steps t WHERE t.run_id = p.run_id AND t.stage = 'rl') AS trained_steps,
       (SELECT list(DISTINCT e.step ORDER BY e.step) FROM eval_scores e WHERE e.run_id = p.run_id
        AND e.eval_id = p.eval_id) AS eval_steps
FROM planned p LEFT JOIN runs r ON r.run_id = p.run_id AND r.stage = 'rl'
ORDER BY p.label, p.seed
;

-- name: accuracy
-- Per setting and benchmark (and the seeds' set averages "Avg math" / "Avg OOD", taken per run over a complete
-- set): avg@k of each run's final evaluation (its last planned step), mean and sample std over seeds, and the 95%
-- interval of the mean (Student's t, clipped to [0, 1]). Step 0 evaluations (eval.at_start) are the model RL starts
-- from (planned.start_from: its SFT job, or verl's model_path, and the eval settings a grid point sets): one row per
-- starting model and eval settings, `start` true, one evaluation (its runs share it), with its bootstrap interval
-- over problems.
WITH planned AS ($planned),
t95(df, t) AS (VALUES $t95),
scored AS (
    SELECT p.label, p.method, p.seed, e.run_id, e.step = 0 AS start, p.start_from, e.benchmark,
           e.avg_at_k, e.pass_at_k, e.mean_len, e.n_samples AS k, e.n_problems, e.avg_ci_low AS eval_ci_low,
           e.avg_ci_high AS eval_ci_high
    FROM eval_scores e JOIN planned p USING (run_id, eval_id)
    WHERE e.k = e.n_samples AND (e.step = p.steps OR e.step = 0)
),
per_run AS (  -- the starting point of a run is its starting model's: one evaluation per starting model
    SELECT CASE WHEN start THEN 'start' ELSE label END AS label,
           CASE WHEN NOT start THEN method WHEN starts_with(start_from, 'SFT ') THEN 'sft' ELSE 'base' END AS method,
           start, CASE WHEN start THEN start_from END AS start_from, CASE WHEN start THEN NULL ELSE seed END AS seed,
           run_id, benchmark, avg_at_k, pass_at_k, mean_len, k, n_problems, eval_ci_low, eval_ci_high
    FROM scored
),
sets AS (
    SELECT label, method, start, start_from, seed, run_id, 'Avg math' AS benchmark, avg(avg_at_k) AS avg_at_k
    FROM per_run WHERE benchmark IN ($math_set) GROUP BY ALL HAVING count(DISTINCT benchmark) = $n_math
    UNION ALL
    SELECT label, method, start, start_from, seed, run_id, 'Avg OOD' AS benchmark, avg(avg_at_k) AS avg_at_k
    FROM per_run WHERE benchmark IN ($ood_set) GROUP BY ALL HAVING count(DISTINCT benchmark) = $n_ood
),
cells AS (
    SELECT * FROM per_run UNION ALL BY NAME SELECT * FROM sets
),
stats AS (
    SELECT label, method, start, start_from, benchmark, count(DISTINCT seed) AS seeds, avg(avg_at_k) AS mean,
           stddev_samp(avg_at_k) AS std, avg(pass_at_k) AS pass_at_k, avg(mean_len) AS mean_len,
           any_value(k) AS k, any_value(n_problems) AS n_problems, any_value(eval_ci_low) AS eval_ci_low,
           any_value(eval_ci_high) AS eval_ci_high
    FROM (SELECT DISTINCT ON (label, start_from, seed, benchmark) * FROM cells)  -- a start: one evaluation (seed NULL)
    GROUP BY ALL
)
SELECT s.* EXCLUDE (eval_ci_low, eval_ci_high),  -- (clipped to [0, 1]: with 2 seeds the t interval is wider;
       -- none from one seed: greatest / least would skip the NULL and print [0, 1])
       CASE WHEN s.start THEN s.eval_ci_low WHEN s.seeds > 1 THEN greatest(0, s.mean - t.t * s.std / sqrt(s.seeds))
       END AS ci_low,
       CASE WHEN s.start THEN s.eval_ci_high WHEN s.seeds > 1 THEN least(1, s.mean + t.t * s.std / sqrt(s.seeds))
       END AS ci_high
FROM stats s LEFT JOIN t95 t ON t.df = s.seeds - 1
ORDER BY NOT start, label, benchmark
;

-- name: train_curves
-- Per setting and RL step: mean, min and max over seeds of reward, entropy, response length and KL, and how many
-- seeds' update gates (SFPO / GXPO) tripped at that step.
WITH planned AS ($planned)
SELECT p.label, t.step, u.metric, avg(u.value) AS mean, min(u.value) AS low, max(u.value) AS high,
       count(u.value) AS seeds, count_if(t.gate_tripped)::BIGINT AS gate_trips
FROM train_steps t JOIN planned p USING (run_id)
JOIN (UNPIVOT (SELECT run_id, step, reward, entropy, response_len, kl FROM train_steps WHERE stage = 'rl')
      ON reward, entropy, response_len, kl INTO NAME metric VALUE value) u USING (run_id, step)
WHERE t.stage = 'rl'
GROUP BY ALL
ORDER BY p.label, u.metric, t.step
;

-- name: method_curves
-- Per setting, RL step and per-step number a method card declares (workflow/methods/*: a mixed-policy method's
-- off-policy and SFT shares, HPT's prompts switched to SFT, Prefix-RFT's prefix length, ReLIFT's interleaved SFT
-- rows, an update rule's diagnostics): mean, min and max over seeds, where the setting's runs logged it (UNPIVOT
-- leaves out NULLs: a number of a method the run does not use).
WITH planned AS ($planned)
SELECT p.label, u.step, u.metric, avg(u.value) AS mean, min(u.value) AS low, max(u.value) AS high,
       count(u.value) AS seeds
FROM (UNPIVOT (SELECT run_id, step, COLUMNS(lambda c: c IN ($method_numbers))::DOUBLE
               FROM train_steps WHERE stage = 'rl')
      ON COLUMNS(* EXCLUDE (run_id, step)) INTO NAME metric VALUE value) u
JOIN planned p USING (run_id)
GROUP BY ALL
ORDER BY p.label, u.metric, u.step
;

-- name: eval_curves
-- Per setting, benchmark and evaluated step: avg@k (mean, min and max over seeds) and the compute spent to get
-- there, each run's running totals of backward passes, rollouts, FLOPs, wall-clock seconds and GPU-hours (wall-clock
-- x the run's GPUs: as SLURM allocated them, else as planned; null on CPU) (mean over seeds).
WITH planned AS ($planned),
spent AS ($spent)
SELECT p.label, e.benchmark, e.step, count(*) AS seeds, avg(e.avg_at_k) AS mean, min(e.avg_at_k) AS low,
       max(e.avg_at_k) AS high, avg(coalesce(s.backward_passes, 0)) AS backward_passes,
       avg(coalesce(s.rollouts, 0)) AS rollouts, avg(coalesce(s.flops, 0)) AS flops,
       avg(coalesce(s.wall_s, 0)) AS wall_s,
       avg(coalesce(s.wall_s, 0) * nullif(coalesce((SELECT max(g.slurm_gpus) FROM runs g
                                                     WHERE g.run_id = e.run_id AND g.stage = 'rl'), p.gpus), 0))
           / 3600 AS gpu_hours
FROM eval_scores e JOIN planned p USING (run_id, eval_id)
LEFT JOIN spent s ON s.run_id = e.run_id AND s.step = e.step
WHERE e.k = e.n_samples
GROUP BY ALL
ORDER BY p.label, e.benchmark, e.step
;

-- name: efficiency
-- Against the baseline setting ($baseline_name), per setting and benchmark on the evaluations after step 0 (mean
-- avg@k over seeds at each evaluated step, with the seeds' mean running totals of compute): the step, backward
-- passes, rollouts, FLOPs, wall-clock and GPU-hours (wall-clock x the run's GPUs: as SLURM allocated them, else as
-- planned; null on CPU) each setting needed
-- to first reach the baseline's best mean, and the same for the baseline (reached: null where a setting never
-- does); then each setting's mean at the baseline's total backward passes and total wall-clock (its last
-- evaluation within that budget).
WITH planned AS ($planned),
spent AS ($spent),
curve AS (
    SELECT p.label, e.benchmark, e.step, avg(e.avg_at_k) AS acc, avg(s.backward_passes) AS backward_passes,
           avg(s.rollouts) AS rollouts, avg(s.flops) AS flops, avg(s.wall_s) AS wall_s,
           avg(s.wall_s * nullif(coalesce(g.slurm_gpus, p.gpus), 0)) / 3600 AS gpu_hours
    FROM eval_scores e JOIN planned p USING (run_id, eval_id)
    JOIN spent s ON s.run_id = e.run_id AND s.step = e.step
    LEFT JOIN runs g ON g.run_id = e.run_id AND g.stage = 'rl'
    WHERE e.k = e.n_samples AND e.step > 0
    GROUP BY ALL
),
target AS (SELECT benchmark, max(acc) AS best FROM curve WHERE label = $baseline GROUP BY ALL),
reach AS (
    SELECT c.label, c.benchmark, min(c.step) AS step, arg_min(c.backward_passes, c.step) AS backward_passes,
           arg_min(c.rollouts, c.step) AS rollouts, arg_min(c.flops, c.step) AS flops,
           arg_min(c.wall_s, c.step) AS wall_s, arg_min(c.gpu_hours, c.step) AS gpu_hours
    FROM curve c JOIN target t USING (benchmark) WHERE c.acc >= t.best
    GROUP BY ALL
),
budget AS (
    SELECT benchmark, max(backward_passes) AS backward_passes, max(wall_s) AS wall_s
    FROM curve WHERE label = $baseline GROUP BY ALL
),
at_budget AS (
    SELECT c.label, c.benchmark,
           arg_max(c.acc, c.step) FILTER (WHERE c.backward_passes <= b.backward_passes) AS acc_at_backward_passes,
           arg_max(c.acc, c.step) FILTER (WHERE c.wall_s <= b.wall_s) AS acc_at_wall_s
    FROM curve c JOIN budget b USING (benchmark)
    GROUP BY ALL
)
SELECT s.label, s.benchmark, t.best AS target, s.label = $baseline AS baseline, s.final_acc,
       r.step, r.backward_passes, r.rollouts, r.flops, r.wall_s, r.gpu_hours,
       r.step / base.step AS step_ratio, r.backward_passes / base.backward_passes AS backward_passes_ratio,
       r.rollouts / base.rollouts AS rollouts_ratio, r.flops / base.flops AS flops_ratio,
       r.wall_s / base.wall_s AS wall_s_ratio, r.gpu_hours / base.gpu_hours AS gpu_hours_ratio,
       a.acc_at_backward_passes, a.acc_at_wall_s
FROM (SELECT label, benchmark, arg_max(acc, step) AS final_acc FROM curve GROUP BY ALL) s
JOIN target t USING (benchmark)
LEFT JOIN reach r USING (label, benchmark)
LEFT JOIN reach base ON base.benchmark = s.benchmark AND base.label = $baseline
LEFT JOIN at_budget a USING (label, benchmark)
ORDER BY s.benchmark, NOT baseline, s.label
;

-- name: paired
-- Two paired comparisons at the final evaluations, by seed and problem, on the per-problem accuracy over samples:
-- versus 'start', each setting minus its own starting model (its step-0 evaluation, eval.at_start: did RL improve
-- the model?); versus 'baseline', each setting minus the baseline ($baseline_name) on the seeds and problems both
-- have. Each gives the mean difference with a 95% interval and two-sided p-value from $bootstrap bootstrap resamples
-- of the seeds and, independently, of the problems (each draw is a hash of (resample, position): rerunning gives
-- the same numbers).
WITH planned AS ($planned),
acc AS (
    SELECT p.label, p.seed, s.benchmark, s.problem_id, s.step = 0 AS start, avg(s.correct::INT) AS acc
    FROM eval_samples s JOIN planned p USING (run_id, eval_id)
    WHERE s.step = p.steps OR s.step = 0
    GROUP BY ALL
),
diffs AS (
    SELECT 'start' AS versus, a.label, a.benchmark, a.seed, a.problem_id, a.acc - b.acc AS diff
    FROM acc a JOIN acc b ON b.start AND NOT a.start AND a.label = b.label AND a.benchmark = b.benchmark
         AND a.seed = b.seed AND a.problem_id = b.problem_id
    UNION ALL
    SELECT 'baseline' AS versus, a.label, a.benchmark, a.seed, a.problem_id, a.acc - b.acc AS diff
    FROM acc a JOIN acc b ON NOT a.start AND NOT b.start AND b.label = $baseline AND a.label <> b.label
         AND a.benchmark = b.benchmark AND a.seed = b.seed AND a.problem_id = b.problem_id
),
indexed AS (
    SELECT *, dense_rank() OVER (PARTITION BY versus, label, benchmark ORDER BY seed) - 1 AS s_idx,
           dense_rank() OVER (PARTITION BY versus, label, benchmark ORDER BY problem_id) - 1 AS p_idx
    FROM diffs
),
sizes AS (
    SELECT versus, label, benchmark, max(s_idx) + 1 AS n_seeds, max(p_idx) + 1 AS n_problems,
           avg(diff) AS mean_diff
    FROM indexed GROUP BY ALL
),
resamples AS (SELECT range AS b FROM range($bootstrap)),
seed_draws AS (  -- resample b's seeds: position j draws a seed index from hash(b, j, 's')'s high 32 bits
    -- (its low bits are not independent across positions: a mod of the whole hash draws correlated problems)
    SELECT z.versus, z.label, z.benchmark, r.b, (hash(r.b, j.range, 's') >> 32) % z.n_seeds AS s_idx
    FROM sizes z, resamples r, range(z.n_seeds) j
),
problem_draws AS (
    SELECT z.versus, z.label, z.benchmark, r.b, (hash(r.b, i.range, 'p') >> 32) % z.n_problems AS p_idx
    FROM sizes z, resamples r, range(z.n_problems) i
),
stats AS (  -- each resample's mean difference over its drawn seeds x drawn problems
    SELECT sd.versus, sd.label, sd.benchmark, sd.b, avg(x.diff) AS mean_diff
    FROM seed_draws sd
    JOIN problem_draws pd USING (versus, label, benchmark, b)
    JOIN indexed x ON x.versus = sd.versus AND x.label = sd.label AND x.benchmark = sd.benchmark
         AND x.s_idx = sd.s_idx AND x.p_idx = pd.p_idx
    GROUP BY ALL
)
SELECT z.versus, z.label, z.benchmark, z.n_seeds, z.n_problems, z.mean_diff,
       quantile_cont(s.mean_diff, 0.025) AS ci_low, quantile_cont(s.mean_diff, 0.975) AS ci_high,
       least(1.0, 2 * least(avg((s.mean_diff <= 0)::INT), avg((s.mean_diff >= 0)::INT))) AS p_value
FROM sizes z JOIN stats s USING (versus, label, benchmark)
GROUP BY ALL
ORDER BY z.versus DESC, z.benchmark, z.label
;

-- name: training_compute
-- Per setting: what training each run that trained all its steps cost, mean over those runs: the FLOPs of its RL
-- steps and of its SFT job's steps (an SFT job its seeds share counts in full for each run: it is part of what each
-- cost to make). A pretrained base's steps (config.pretrain) are not counted, as a paper does not count its base
-- model's pretraining.
WITH planned AS ($planned),
rl AS (SELECT run_id, sum(flops) AS flops, max(step) AS last FROM train_steps WHERE stage = 'rl' GROUP BY run_id),
parents AS (SELECT run_id, any_value(parent_id) AS parent_id FROM runs WHERE stage = 'rl' GROUP BY run_id),
sft AS (SELECT run_id AS parent_id, sum(flops) AS flops FROM train_steps WHERE stage = 'sft' GROUP BY run_id)
SELECT p.label, count(*) AS runs, avg(coalesce(sft.flops, 0)) AS sft_flops, avg(rl.flops) AS rl_flops,
       avg(coalesce(sft.flops, 0) + rl.flops) AS flops
FROM planned p JOIN rl USING (run_id) LEFT JOIN parents USING (run_id) LEFT JOIN sft USING (parent_id)
WHERE rl.last = p.steps
GROUP BY p.label
ORDER BY p.label
;

-- name: graders
-- Per setting, benchmark and grader: avg@k of each run's final evaluation as each grader judges the same responses
-- (a benchmark's own grader: eval_samples.correct; the others: eval_grades, from `rlsweep rescore` or
-- eval.graders), mean over seeds. Only the evaluations another grader judged; no rows without any.
WITH planned AS ($planned),
graded AS (SELECT DISTINCT run_id, eval_id, step, benchmark FROM eval_grades),
verdicts AS (
    SELECT s.run_id, s.eval_id, s.step, s.benchmark, coalesce(s.grader, $own_grader) AS grader, true AS own,
           s.correct
    FROM eval_samples s SEMI JOIN graded USING (run_id, eval_id, step, benchmark)
    UNION ALL
    SELECT run_id, eval_id, step, benchmark, grader, false AS own, correct FROM eval_grades
),
per_run AS (
    SELECT p.label, p.method, p.seed, v.benchmark, v.grader, v.own, avg(v.correct::INT) AS acc
    FROM verdicts v JOIN planned p USING (run_id, eval_id)
    WHERE v.step = p.steps
    GROUP BY ALL
)
SELECT label, method, benchmark, grader, own, count(*) AS seeds, avg(acc) AS mean
FROM per_run
GROUP BY ALL
ORDER BY benchmark, label, own DESC, grader
;

-- name: grader_disagreement
-- Per benchmark and grader: over every sample of the sweep's evaluations (all steps) that grader judged, how often
-- its verdict differs from the benchmark's own grader's, each one's accuracy, and which way they differ.
WITH planned AS ($planned),
pairs AS (
    SELECT benchmark, g.grader, coalesce(s.grader, $own_grader) AS own_grader, s.correct AS own_correct, g.correct
    FROM eval_grades g JOIN eval_samples s USING (run_id, eval_id, step, benchmark, problem_id, sample_idx)
    SEMI JOIN planned USING (run_id, eval_id)
)
SELECT benchmark, grader, any_value(own_grader) AS own_grader, count(*) AS samples,
       avg((correct <> own_correct)::INT) AS disagree, avg(own_correct::INT) AS own_acc, avg(correct::INT) AS acc,
       count_if(correct AND NOT own_correct) AS only_grader_right, count_if(own_correct AND NOT correct) AS only_own_right
FROM pairs
GROUP BY ALL
ORDER BY benchmark, grader
;

-- name: grader_examples
-- Up to three responses per benchmark and grader where it and the benchmark's own grader disagree: the answer they
-- were judged against, what each extracted, each verdict and the end of the response (a fixed pseudo-random pick).
WITH planned AS ($planned)
SELECT benchmark, grader, own_grader, gold, own_extracted, own_correct, extracted, correct, response_end
FROM (
    SELECT benchmark, g.grader, coalesce(s.grader, $own_grader) AS own_grader, g.gold, s.extracted AS own_extracted,
           s.correct AS own_correct, g.extracted, g.correct, right(s.response, 240) AS response_end,
           row_number() OVER (PARTITION BY benchmark, g.grader
                              ORDER BY hash(run_id, step, problem_id, sample_idx)) AS pick
    FROM eval_grades g JOIN eval_samples s USING (run_id, eval_id, step, benchmark, problem_id, sample_idx)
    SEMI JOIN planned USING (run_id, eval_id)
    WHERE g.correct <> s.correct
)
WHERE pick <= 3
ORDER BY benchmark, grader, pick
;

-- name: seed_variance
-- Per setting, benchmark and seed: the final evaluation's accuracy and the variance its finite samples add to it
-- (each problem's observed accuracy a over its k samples: sum of a (1 - a) / (k - 1), over problems squared; an
-- unbiased estimate). Between seeds the accuracies vary by that plus training randomness: the report's "How many
-- seeds" section separates the two (workflow/report/power.py).
WITH planned AS ($planned),
per_problem AS (
    SELECT p.label, p.seed, s.benchmark, s.problem_id, avg(s.correct::INT) AS acc, count(*) AS k
    FROM eval_samples s JOIN planned p USING (run_id, eval_id)
    WHERE s.step = p.steps AND s.step > 0
    GROUP BY ALL
)
SELECT label, benchmark, seed, avg(acc) AS acc, min(k) AS k, count(*) AS problems,
       sum(acc * (1 - acc) / (k - 1)) / (count(*) * count(*)) AS eval_var
FROM per_problem
WHERE k >= 2
GROUP BY ALL
ORDER BY benchmark, label, seed
;
