"""SFPO and GXPO: exactness, backward-pass accounting, gates, AdamW, untouched parameters."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from rule_problems import mlp_closure, mlp_problem, reference_gxpo_point
from workflow.algos.gates import ZGate
from workflow.methods.grpo.algorithm import GRPOStep
from workflow.methods.gxpo.algorithm import GXPO, geometric_scale
from workflow.methods.sfpo.algorithm import SFPO


class Counter:
    """Wraps a closure and counts its calls (= backward passes)."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self):
        self.calls += 1
        return self.fn()


def quadratic(lam: torch.Tensor, target: torch.Tensor, param: torch.nn.Parameter, opt):
    def closure():
        opt.zero_grad(set_to_none=True)
        loss = 0.5 * (lam * (param - target) ** 2).sum()
        loss.backward()
        return loss
    return closure


# ------------------------------------------------------------------------------------------------ exactness
@pytest.mark.parametrize("K", [2, 3, 5, 10])
@pytest.mark.parametrize("ratio_source", ["grad", "displacement"])
def test_gxpo_step_lands_on_the_k_plus_1_th_gradient_descent_iterate(K, ratio_source):
    torch.manual_seed(K)
    eta = 0.1
    # eta*lam in (0, 1.6): retention r = 1 - eta*lam in (-0.6, 1); the coordinates with r < 0 oscillate
    lam = torch.cat([torch.rand(40, dtype=torch.float64) * 9.5 + 0.1, torch.rand(20, dtype=torch.float64) * 6 + 10])
    assert (1 - eta * lam < 0).sum() == 20
    target = torch.randn(60, dtype=torch.float64)
    theta0 = target + torch.randn(60, dtype=torch.float64)

    gd = theta0.clone()
    for _ in range(K + 1):
        gd -= eta * lam * (gd - target)

    p = torch.nn.Parameter(theta0.clone())
    opt = torch.optim.SGD([p], lr=eta)
    rule = GXPO(K=K, alpha=1.0, eps=1e-300, clamp="none", ratio_source=ratio_source, max_grad_norm=None)
    closure = Counter(quadratic(lam, target, p, opt))
    stats = rule.step([p], opt, closure)
    assert closure.calls == stats.backward_passes == 3
    assert torch.max(torch.abs(p.detach() - gd)) <= 1e-10
    assert stats.diagnostics["gxpo_inactive_frac"] == 0.0


def test_geometric_scale_limits_and_closed_form():
    r = torch.tensor([-0.7, -0.2, 0.0, 0.3, 0.9, 0.999999, 1.0, -1.0], dtype=torch.float64)
    for K in (2, 3, 4, 5, 10):
        s = geometric_scale(r.clone(), K)
        closed = (1 - r[:6] ** K) / (1 - r[:6] ** 2)
        assert torch.allclose(s[:6], closed, rtol=1e-9)
        assert s[6] == K / 2  # r -> 1
        if K % 2 == 0:
            assert s[7] == K / 2  # r -> -1, even K: finite polynomial
        else:
            assert math.isinf(s[7])  # odd K genuinely diverges at r = -1 (the clamp handles it)


def test_gxpo_default_clamp_and_inactive_coordinates_keep_observed_displacement():
    eta = 0.1
    lam = torch.tensor([1.0, 19.9, 0.0], dtype=torch.float64)  # r = 0.9; r = -0.99 (s blows up for K=5); g = 0
    target = torch.zeros(3, dtype=torch.float64)
    p = torch.nn.Parameter(torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=eta)
    stats = GXPO(K=5, alpha=1.0, max_grad_norm=None).step([p], opt, quadratic(lam, target, p, opt))
    assert all(math.isfinite(v) for v in p.detach().tolist())
    assert stats.diagnostics["gxpo_inactive_frac"] == pytest.approx(1 / 3)
    assert p.detach()[2] == 1.0  # zero gradient: displacement 0, nothing moves


# ------------------------------------------------------------------------------------------------- SFPO
def run_rule(rule, steps=3, opt_cls=torch.optim.AdamW, seed=0, **opt_kw):
    model, x, y = mlp_problem(seed)
    opt = opt_cls(model.parameters(), lr=1e-2, **opt_kw)
    closure = Counter(mlp_closure(model, opt, x, y))
    stats = [rule.step(list(model.parameters()), opt, closure) for _ in range(steps)]
    return model, stats, closure.calls


def test_sfpo_alpha_0_is_bit_identical_to_grpo_and_alpha_1_is_k_plus_1_plain_steps():
    grpo, _, _ = run_rule(GRPOStep(max_grad_norm=0.5))
    sfpo0, stats0, calls0 = run_rule(SFPO(K=3, alpha=0.0, max_grad_norm=0.5))
    for a, b in zip(grpo.parameters(), sfpo0.parameters()):
        assert torch.equal(a, b)
    assert calls0 == 3 and all(s.backward_passes == 1 for s in stats0)

    plain, _, _ = run_rule(GRPOStep(max_grad_norm=0.5), steps=3 * 4)
    sfpo1, stats1, calls1 = run_rule(SFPO(K=3, alpha=1.0, max_grad_norm=0.5), steps=3)
    for a, b in zip(plain.parameters(), sfpo1.parameters()):
        assert torch.equal(a, b)
    assert calls1 == 3 * 4 and all(s.backward_passes == 4 and s.optimizer_steps == 4 for s in stats1)


def test_sfpo_repositions_between_theta0_and_thetaK():
    model, x, y = mlp_problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    theta0 = [p.detach().clone() for p in model.parameters()]
    seen = []
    base = mlp_closure(model, opt, x, y)

    def closure():  # record the point each backward pass is taken at
        seen.append([p.detach().clone() for p in model.parameters()])
        return base()

    SFPO(K=3, alpha=0.25, max_grad_norm=None).step(list(model.parameters()), opt, closure)
    assert len(seen) == 4
    slow_start = seen[3]  # the slow step's backward pass is taken at the repositioned point
    # thetaK = 3 plain SGD steps from theta0, recomputed independently
    ref, _, _ = mlp_problem()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    ref_closure = mlp_closure(ref, ref_opt, x, y)
    for _ in range(3):
        ref_closure()
        ref_opt.step()
    for t0, tk, slow in zip(theta0, ref.parameters(), slow_start):
        assert torch.allclose(slow, t0 + 0.25 * (tk.detach() - t0), atol=1e-12)


# --------------------------------------------------------------------------------------- accounting, gates
@pytest.mark.parametrize("K", [2, 3, 5, 10])
def test_backward_passes_per_active_step(K):
    _, stats, calls = run_rule(GXPO(K=K, alpha=0.5), steps=2)
    assert calls == 6 and [s.backward_passes for s in stats] == [3, 3]
    _, stats, calls = run_rule(SFPO(K=K, alpha=0.5), steps=2)
    assert calls == 2 * (K + 1) and [s.backward_passes for s in stats] == [K + 1, K + 1]


def _told(rule, enabled: bool):
    rule.set_enabled(enabled)
    return rule


class TwoPasses(GRPOStep):  # a plug-in's rule with a step of its own
    def step(self, params, optimizer, closure):
        closure()
        return super().step(params, optimizer, closure)


@pytest.mark.parametrize("rule", [GRPOStep(), SFPO(K=3, alpha=0.5), GXPO(K=3, alpha=0.5), SFPO(K=3, alpha=0.0),
                                  _told(GXPO(K=3, alpha=0.5, gate_here=False), False),
                                  _told(SFPO(K=3, alpha=0.5, gate_here=False), True), TwoPasses()],
                         ids=["grpo", "sfpo", "gxpo", "sfpo-alpha0", "gxpo-driver-off", "sfpo-driver-on", "own-step"])
def test_a_rule_says_beforehand_whether_its_step_takes_one_pass(rule):
    """What verl's worker relies on to hand a single pass the batch itself (workflow/engines/verl/workers/rule_step.py):
    a rule that says one pass calls its closure once; one that calls it more says so."""
    said = rule.single_pass()
    _, _, calls = run_rule(rule, steps=1)
    assert said == (calls == 1)


def spike_sequence(n, at, base=1.0, jitter=0.01, spike=5.0):
    return [base + jitter * math.sin(i * 1.7) + (spike if i == at else 0.0) for i in range(n)]


def test_z_gate_trips_exactly_at_the_spike_and_never_during_warmup():
    gate = ZGate(window=5, tau=3.0, warmup=5)
    results = [gate.update(x) for x in spike_sequence(20, at=12)]
    assert [i for i, r in enumerate(results) if r.tripped_now] == [12]
    assert all(r.z is None for r in results[:5]) and all(r.z is None for r in results[13:])
    gate = ZGate(window=5, tau=3.0, warmup=5)
    assert not any(gate.update(x).tripped_now for x in spike_sequence(20, at=3))  # spike inside warm-up
    # the z-score uses past values only (computed before insertion)
    gate = ZGate(window=3, tau=100.0, warmup=3)
    for x in (1.0, 2.0, 3.0):
        gate.update(x)
    assert gate.update(4.0).z == pytest.approx((4.0 - 2.0) / math.sqrt(2 / 3))


def test_sfpo_entropy_trigger_switches_to_one_pass_grpo_for_good():
    model, x, y = mlp_problem()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    closure = Counter(mlp_closure(model, opt, x, y))
    rule = SFPO(K=3, alpha=0.8, window=4, tau=2.0)
    entropies = spike_sequence(10, at=6)
    stats = []
    for h in entropies:
        rule.on_rollout({"entropy": h})
        stats.append(rule.step(list(model.parameters()), opt, closure))
    assert [s.backward_passes for s in stats] == [4] * 6 + [1] * 4
    assert [s.gate_tripped for s in stats] == [False] * 6 + [True] + [False] * 3
    assert [s.alpha for s in stats] == [0.8] * 6 + [0.0] * 4
    restored = SFPO(K=3, alpha=0.8, window=4, tau=2.0)
    restored.load_state_dict(rule.state_dict())  # the checkpointed rule stays tripped
    assert restored.gate.tripped and restored.gate.tripped_at == 6


def test_gxpo_gate_on_corrective_gradient_norm_trips_once_then_one_pass():
    model, x, y = mlp_problem()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    step = {"t": 0, "probe": 0}
    scales = spike_sequence(12, at=8, jitter=0.001, spike=50.0)

    def scale():  # the loss is scaled per training step, so the corrective-gradient norm spikes at step 8
        return scales[step["t"]]

    closure = Counter(mlp_closure(model, opt, x, y, scale))
    rule = GXPO(K=5, alpha=0.5, window=4, warmup=4, tau=3.0, max_grad_norm=None)
    stats = []
    for t in range(12):
        step["t"] = t
        stats.append(rule.step(list(model.parameters()), opt, closure))
    assert [s.gate_tripped for s in stats].index(True) == 8 and sum(s.gate_tripped for s in stats) == 1
    assert [s.backward_passes for s in stats] == [3] * 9 + [1] * 3  # the tripping step itself was active
    assert all(s.z is None for s in stats[:4])  # warm-up


# -------------------------------------------------------------------------------- AdamW + clipping reference
def test_gxpo_with_adamw_and_binding_clip_uses_unclipped_gradients():
    model, x, y = mlp_problem()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    base = mlp_closure(model, opt, x, y)
    trace = []

    def closure():
        trace.append([p.detach().clone() for p in model.parameters()])
        loss = base()
        trace[-1] = (trace[-1], [p.grad.detach().clone() for p in model.parameters()])
        return loss

    stats = GXPO(K=5, alpha=0.7, eps=1e-12, max_grad_norm=0.01).step(list(model.parameters()), opt, closure)
    assert stats.grad_norm > 0.01  # the clip really bound
    (theta0, g0), (theta1, g1), (theta_rep, _) = trace
    # theta2 (after the second clipped AdamW step) is rebuilt independently with a twin model and optimizer
    twin, _, _ = mlp_problem()
    twin_opt = torch.optim.AdamW(twin.parameters(), lr=1e-2, weight_decay=0.01)
    for g in (g0, g1):
        for p, gi in zip(twin.parameters(), g):
            p.grad = gi.clone()
        torch.nn.utils.clip_grad_norm_(list(twin.parameters()), 0.01)
        twin_opt.step()
    theta2 = [p.detach() for p in twin.parameters()]
    expected = reference_gxpo_point(theta0, g0, theta1, g1, theta2, 5, 0.7, 1e-12)
    for got, exp in zip(theta_rep, expected):
        assert torch.allclose(got, exp, rtol=1e-9, atol=1e-12)
    assert stats.diagnostics["gxpo_cos_g0_gcorr"] <= 1.0 and math.isfinite(stats.diagnostics["gxpo_gcorr_norm"])


def test_parameters_without_gradients_are_untouched():
    for rule in (SFPO(K=3, alpha=0.5), GXPO(K=5, alpha=0.5)):
        model, x, y = mlp_problem()
        unused = torch.nn.Parameter(torch.randn(7, dtype=torch.float64))
        before = unused.detach().clone()
        opt = torch.optim.AdamW([*model.parameters(), unused], lr=1e-2)
        rule.step([*model.parameters(), unused], opt, mlp_closure(model, opt, x, y))
        assert unused.grad is None and torch.equal(unused.detach(), before)


def test_rules_refuse_invalid_settings():
    with pytest.raises(ValueError):
        SFPO(K=0, alpha=0.5)
    with pytest.raises(ValueError):
        GXPO(K=1, alpha=0.5)
    with pytest.raises(ValueError):
        GXPO(K=3, alpha=1.5)
    with pytest.raises(ValueError):
        ZGate(window=1, tau=1.0)
    model, x, y = mlp_problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, maximize=True)
    with pytest.raises(ValueError, match="maximize"):
        GXPO(K=3, alpha=0.5).step(list(model.parameters()), opt, mlp_closure(model, opt, x, y))


def test_rule_state_round_trips_through_a_copy():
    rule = GXPO(K=3, alpha=0.5, window=3, warmup=3)
    _, _, _ = run_rule(rule, steps=4)
    twin = GXPO(K=3, alpha=0.5, window=3, warmup=3)
    twin.load_state_dict(copy.deepcopy(rule.state_dict()))
    assert twin.gate.state_dict() == rule.gate.state_dict()


def test_gxpo_gate_ignores_batches_without_learning_signal():
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=0.1)

    def closure():  # every reward in every group equal: the loss is 0 whatever the parameters
        opt.zero_grad(set_to_none=True)
        loss = (p * 0.0).sum()
        loss.backward()
        return loss

    rule = GXPO(K=3, alpha=0.5, window=2, warmup=2)
    for _ in range(3):
        rule.step([p], opt, closure)
    assert rule.gate.seen == 0 and torch.equal(p.detach(), torch.ones(4, dtype=torch.float64))


# ------------------------------------------------------------------------------------ GXPO's chunks (issue 64)
def _many_tensors(seed: int) -> list[torch.nn.Parameter]:
    """Tensors of a model's mix of sizes: big ones of several chunks with tails, and many small ones (norms,
    biases) that the chunk plan packs together; one without a gradient (untouched)."""
    g = torch.Generator().manual_seed(seed)
    sizes = [700, 3, 64, 5, 1, 300, 2, 2, 129, 256, 7, 1000, 17]
    return [torch.nn.Parameter(torch.randn(n, generator=g)) for n in sizes]


def _gxpo_step(params, K, ratio_source, clamp):
    """One GXPO step with a non-linear loss (so the ratios vary), SGD with momentum and a binding clip."""
    rule = GXPO(K=K, alpha=0.7, ratio_source=ratio_source, clamp=clamp, max_grad_norm=0.5)
    opt = torch.optim.SGD(params[:-1], lr=0.1, momentum=0.9)
    weights = [torch.linspace(0.5, 2.0, p.numel()) for p in params]

    def closure():
        opt.zero_grad(set_to_none=True)
        loss = sum((w * torch.sin(p) ** 2 + 0.1 * p ** 4).sum() for w, p in zip(weights[:-1], params[:-1]))
        loss.backward()
        return loss
    stats = rule.step(params, opt, closure)
    return [p.detach().clone() for p in params], stats.diagnostics


@pytest.mark.parametrize("K,ratio_source,clamp", [(3, "grad", "s"), (5, "displacement", "r"), (4, "grad", "none")])
def test_gxpo_packing_small_tensors_into_chunks_changes_no_weight_and_no_diagnostic(K, ratio_source, clamp,
                                                                                   monkeypatch):
    """The chunk plan works small tensors and big tensors' tails together (one op per chunk, not per tensor); every
    coordinate's arithmetic is the same, so the weights are equal bit for bit to working each tensor alone (today's
    plan before packing), and the diagnostics to rounding: the sampled ratios are the same coordinates, the sums
    float64, and cos(g0, g_corr) a float32 dot per chunk (chunks of other bounds round it otherwise)."""
    import workflow.algos.sharded as sharded
    import workflow.methods.gxpo.algorithm as gxpo
    monkeypatch.setattr(sharded, "CHUNK", 128)  # big tensors of several chunks, tails, small ones packed
    monkeypatch.setattr(gxpo, "chunk_size", lambda device: 128)
    plan = gxpo.chunk_plan([700, 3, 64, 5], 128, packed=True, device=torch.device("cpu"))
    assert [c.pieces for c in plan] == [((0, 0, 128),), ((0, 128, 256),), ((0, 256, 384),), ((0, 384, 512),),
                                        ((0, 512, 640),), ((0, 640, 700), (1, 0, 3), (2, 0, 64)), ((3, 0, 5),)]
    packed, diag = _gxpo_step(_many_tensors(0), K, ratio_source, clamp)
    monkeypatch.setattr(GXPO, "flat_buffer", lambda self, name: None)  # no flat snapshots: each tensor alone
    alone, diag_alone = _gxpo_step(_many_tensors(0), K, ratio_source, clamp)
    assert all(torch.equal(a, b) for a, b in zip(packed, alone))
    assert torch.equal(packed[-1], _many_tensors(0)[-1])  # no gradient: untouched
    assert diag.keys() == diag_alone.keys()
    for k in diag:
        tolerance = 1e-6 if k == "gxpo_cos_g0_gcorr" else 1e-12
        assert diag[k] == pytest.approx(diag_alone[k], rel=tolerance, abs=tolerance, nan_ok=True), k
