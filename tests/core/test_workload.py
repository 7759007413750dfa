"""Synthetic workloads: determinism, length statistics, arrivals, prefix sharing."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.config import LENGTH_PRESETS, WorkloadConfig
from kvviz.core.workload import clip_lengths, generate


def same(a, b) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k))
               for k in ("arrival_s", "prompt", "output", "prefix_group"))


def test_the_same_seed_gives_the_same_requests():
    cfg = WorkloadConfig(num_requests=500, rate=5.0, prefix_share=0.3, seed=11)
    assert same(generate(cfg), generate(cfg))


def test_a_different_seed_gives_different_requests():
    a = generate(WorkloadConfig(num_requests=200, seed=1))
    b = generate(WorkloadConfig(num_requests=200, seed=2))
    assert not np.array_equal(a.prompt, b.prompt)


def _clipped_means(preset: str, max_seq_len: int) -> tuple[float, float]:
    """Expected means after the clip, from a large log-normal sample (independent RNG)."""
    p = LENGTH_PRESETS[preset]
    rng = np.random.default_rng(12345)
    n = 400_000

    def draw(mean):
        mu = np.log(mean) - p.sigma ** 2 / 2
        return np.maximum(1, np.rint(rng.lognormal(mu, p.sigma, n)))

    prompt, output = clip_lengths(draw(p.prompt_mean), draw(p.output_mean), max_seq_len)
    return float(prompt.mean()), float(output.mean())


@pytest.mark.parametrize("preset, prompt_mean, output_mean", [
    ("sharegpt-like", 161, 338),
    ("alpaca-like", 19, 58),
])
def test_length_means_match_the_preset(preset, prompt_mean, output_mean):
    w = generate(WorkloadConfig(preset, num_requests=20_000, seed=3))
    want_p, want_o = _clipped_means(preset, 2048)
    assert w.prompt.mean() == pytest.approx(want_p, rel=0.1)
    assert w.output.mean() == pytest.approx(want_o, rel=0.1)
    # the clip at 2048 only trims the tail: the preset's means are still within ~10%
    assert w.prompt.mean() == pytest.approx(prompt_mean, rel=0.1)
    assert w.output.mean() == pytest.approx(output_mean, rel=0.1)


@pytest.mark.parametrize("preset", sorted(LENGTH_PRESETS))
def test_prompt_plus_output_never_exceeds_max_seq_len(preset):
    w = generate(WorkloadConfig(preset, num_requests=5000, max_seq_len=300, prefix_share=0.5,
                                prefix_tokens=200))
    assert (w.final_len <= 300).all()
    assert (w.prompt >= 1).all() and (w.output >= 1).all()


def test_all_at_once_when_rate_is_infinite():
    assert (generate(WorkloadConfig(num_requests=50)).arrival_s == 0).all()


def test_poisson_rate_is_what_was_asked():
    w = generate(WorkloadConfig(num_requests=20_000, rate=8.0, seed=5))
    gaps = np.diff(w.arrival_s)
    assert (gaps >= 0).all()
    assert 1.0 / gaps.mean() == pytest.approx(8.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV = 1


def test_bursty_keeps_the_rate_with_higher_inter_arrival_variance():
    kw = dict(num_requests=20_000, rate=8.0, seed=5)
    poisson = np.diff(generate(WorkloadConfig(**kw)).arrival_s)
    bursty = np.diff(generate(WorkloadConfig(**kw, arrival="bursty", burstiness=0.25))
                     .arrival_s)
    assert 1.0 / bursty.mean() == pytest.approx(8.0, rel=0.1)
    assert bursty.var() > 2 * poisson.var()


def test_arrivals_start_at_zero_and_are_sorted():
    w = generate(WorkloadConfig(num_requests=100, rate=2.0, arrival="bursty"))
    assert w.arrival_s[0] == 0 and (np.diff(w.arrival_s) >= 0).all()


def test_prefix_sharing_fraction_is_what_was_asked():
    w = generate(WorkloadConfig(num_requests=20_000, prefix_share=0.3, prefix_groups=4,
                                prefix_tokens=64, seed=9))
    shared = w.prefix_group >= 0
    assert shared.mean() == pytest.approx(0.3, abs=0.02)
    assert set(np.unique(w.prefix_group[shared]).tolist()) == {0, 1, 2, 3}
    assert (w.prompt[shared] >= 64).all()
    assert w.prefix_tokens == 64


def test_no_prefix_sharing_by_default():
    w = generate(WorkloadConfig(num_requests=100))
    assert (w.prefix_group == -1).all() and w.prefix_tokens == 0


def test_clip_keeps_one_output_token():
    p, o = clip_lengths(np.array([5000, 10]), np.array([10, 5000]), 100)
    assert p.tolist() == [99, 10] and o.tolist() == [1, 90]


def test_total_output_tokens():
    w = generate(WorkloadConfig(num_requests=100))
    assert w.total_output_tokens == int(w.output.sum())
