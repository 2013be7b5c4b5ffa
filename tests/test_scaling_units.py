"Unit checks of sgatlin_nb.scaling moved from nbs/07_scaling.ipynb (issue 71): the frontier helpers on made-up numbers (interpolate_optimum, rank_optima, fieller_crossover against brute force, fits_cross, paired_gaps by hand, newest_runs). The page keeps the checks of what it shows."
import math

import fastcore.test as fc  # test_eq, test_close and test_fail as the page used them (imported by module: pytest would collect test_* names)
import numpy as np
import pytest
import pandas as pd
from scipy import stats

from sgatlin_nb.scaling import (LADDER_KINDS, fieller_crossover, fit_frontier, fits_cross, interpolate_optimum, newest_runs,
                                paired_gaps, rank_optima, holm)


P = np.array([300.0, 1e3, 2e3, 8e3])                       # a parabola in log-parameters, lowest at 1,500
L = 3 + 0.2 * np.log(P / 1500) ** 2


def test_interpolate_optimum_finds_the_vertex():
    "The parabola through a made-up optimum at 1,500 parameters and loss 3 finds it."
    fc.test_close(np.array(interpolate_optimum(P, L)), np.array([1500, 3]), eps=1e-6)


def test_interpolate_optimum_takes_the_points_in_any_order():
    "Reversed input gives the same vertex."
    fc.test_close(np.array(interpolate_optimum(P[::-1], L[::-1])), np.array([1500, 3]), eps=1e-6)  # any order


def test_interpolate_optimum_refuses_an_edge():
    "When the smallest model is the lowest, there is no bracketed optimum."
    fc.test_eq(interpolate_optimum(P[1:], np.log(P[1:])), None)   # the lowest is the smallest model: an edge, not an optimum


@pytest.fixture(scope="module")
def optima():
    "Five variants' made-up optima at one budget, three seeds each: SwiGLU lowest by the mean, sgatlin a close second."
    return pd.DataFrame([dict(variant=v, budget=1.0, n_seeds=3, loss=l, ppl=math.exp(l), ppl_interp=math.exp(l), seed_loss={0: l, 1: l + d, 2: l - d})
                         for v, l, d in zip(LADDER_KINDS, [3.0, 2.9, 2.95, 3.1, 2.91], [0.0, 0.05, 0.0, 0.0, -0.05])])


def test_rank_optima_orders_by_the_seed_means(optima):
    "SwiGLU first, sgatlin a close second, then MoE, MLP and PEER."
    fc.test_eq(rank_optima(optima, 1.0)['order'], ['swiglu', 'sgatlin', 'moe', 'mlp', 'peer'])


def test_rank_optima_is_not_clear_when_the_runner_up_wins_a_seed(optima):
    "The best is higher than the runner-up at seed 1, so the ranking is not clear."
    fc.test_eq(rank_optima(optima, 1.0)['clear'], False)


def test_rank_optima_pairs_the_top_two_seed_by_seed(optima):
    "The best's perplexity relative to the runner-up's at seeds 0, 1 and 2."
    fc.test_close(np.array(list(rank_optima(optima, 1.0)['pair'].values())), np.exp([-0.01, 0.09, -0.11]) - 1, eps=1e-12)


@pytest.mark.parametrize("change", [dict(n_seeds=[3, 3, 1, 3, 3]), dict(ppl_interp=[1.0, 1.0, math.nan, 1.0, 1.0])],
                         ids=['one seed', 'unbracketed optimum'])
def test_rank_optima_declines_too_few_seeds_or_an_unbracketed_optimum(optima, change):
    "A variant with one seed, or whose optimum the ladder does not bracket with half-rungs, gives no ranking."
    fc.test_eq(rank_optima(optima.assign(**change), 1.0), None)


C = np.geomspace(1e11, 1e14, 7)
NOISE = np.array([0.01, -0.012, 0.004, 0.009, -0.015, 0.002, 0.006])
LA, LB = 2.0 - 0.05 * np.log(C / 1e11), 2.05 - 0.07 * np.log(C / 1e11) + NOISE   # b's falls faster: they cross
FR = pd.DataFrame([dict(variant=v, budget=c, loss=math.exp(l)) for v, ls in (('mlp', LA), ('sgatlin', LB)) for c, l in zip(C, ls)])


@pytest.fixture(scope="module")
def fieller():
    return fieller_crossover(FR)


def test_fieller_interval_matches_brute_force(fieller):
    "Fieller's interval is the set of 20,001 log-budgets whose t statistic of the fitted log ratio passes."
    # the t statistic at each log-budget, by its definition (prediction over its standard error); those that pass are the interval
    x, y = np.log(C), LB - LA
    s, i = np.polyfit(x, y, 1)
    sd = math.sqrt(((y - i - s * x) ** 2).sum() / (len(x) - 2))
    grid = np.linspace(np.log(1e9), np.log(1e16), 20_001)
    tstat = np.abs(i + s * grid) / (sd * np.sqrt(1 / len(x) + (grid - x.mean()) ** 2 / ((x - x.mean()) ** 2).sum()))
    kept = grid[tstat <= stats.t.ppf(0.975, len(x) - 2)]
    fc.test_close(np.log([fieller['lo'], fieller['hi']]), np.array([kept.min(), kept.max()]), eps=2 * (grid[1] - grid[0]))


def test_fieller_crossover_is_where_the_two_fits_cross(fieller):
    "The interval's centre is fits_cross of the two fit_frontier lines."
    fc.test_close(fieller['crossover'], fits_cross(fit_frontier(C, np.exp(LA)), fit_frontier(C, np.exp(LB))), eps=1e-6 * fieller['crossover'])


def test_fieller_interval_holds_the_crossover_with_n_minus_2_degrees(fieller):
    "lo < crossover < hi, and 7 budgets leave 5 degrees of freedom."
    assert fieller['lo'] < fieller['crossover'] < fieller['hi'] and fieller['df'] == 5


def test_parallel_frontiers_give_no_bounded_interval():
    "Parallel noisy frontiers: the interval is (0, inf)."
    flat = fieller_crossover(FR.assign(loss=np.exp(np.r_[LA, LA + 0.01 + NOISE])))
    fc.test_eq((flat['lo'], flat['hi']), (0.0, math.inf))              # parallel frontiers and noise: no bounded interval


def test_fits_cross_of_slopes_a_hair_apart_is_inf():
    "A crossing beyond any float is inf, not an overflow."
    fc.test_eq(fits_cross((0.0, -0.1), (1e-3, -0.1 - 1e-9)), math.inf)    # slopes a hair apart: beyond any float, not an error


def test_fieller_crossover_refuses_fewer_than_3_budgets():
    "Two shared budgets cannot give a line and its scatter."
    fc.test_fail(lambda: fieller_crossover(FR[FR.budget < 3e11]), contains='need 3')


PF = pd.DataFrame([dict(variant='mlp', budget=1.0, scale=1, loss=3.0, ppl=math.exp(3.0), seed_loss={0: 3.0, 1: 3.1, 2: 2.9}),
                   dict(variant='sgatlin', budget=1.0, scale=1.5, loss=2.95, ppl=math.exp(2.95), seed_loss={0: 2.9, 1: 3.15, 2: 2.8})])
D = np.array([-0.1, 0.05, -0.1])   # sgatlin's log-loss minus the MLP's, seed by seed: lower at two of three


@pytest.fixture(scope="module")
def pg():
    return paired_gaps(PF).iloc[0]


def test_paired_gaps_per_seed(pg):
    "The per-seed relative gaps are expm1 of the log-loss differences."
    fc.test_close(np.array(pg.gaps), np.expm1(D), eps=1e-12)


def test_paired_gaps_of_the_means(pg):
    "The gap of the seed means is exp(2.95 - 3.0) - 1."
    fc.test_close(pg.gap, math.exp(-0.05) - 1, eps=1e-12)


def test_paired_gaps_t_statistic(pg):
    "The paired t statistic is the mean difference over its standard error."
    fc.test_close(pg.t, D.mean() / (D.std(ddof=1) / math.sqrt(3)), eps=1e-9)


def test_paired_gaps_degrees_and_lower(pg):
    "Three pairs leave 2 degrees of freedom; sgatlin's mean is lower."
    fc.test_eq((pg.df, pg.lower), (2, 'sgatlin'))


def test_paired_gaps_sign_test_two_of_three(pg):
    "Lower in 2 of 3 pairs: a sign-test p of 1, no evidence either way."
    fc.test_close(pg.sign_p, 1.0, eps=1e-12)                              # 2 of 3 lower: no evidence either way


def test_paired_gaps_sign_test_three_of_three():
    "Lower in all 3 pairs: a two-sided sign-test p of 0.25."
    fc.test_close(paired_gaps(PF.assign(seed_loss=[PF.seed_loss[0], {0: 2.9, 1: 3.05, 2: 2.7}])).sign_p.iloc[0], 0.25, eps=1e-12)


def test_newest_runs_keeps_the_later_run_of_a_key():
    "The later table's run replaces the earlier's of the same key; other runs stay."
    nr = newest_runs(pd.DataFrame({'key': ['a', 'b'], 'eval_ppl': [1.0, 2.0]}), pd.DataFrame({'key': ['b', 'c'], 'eval_ppl': [5.0, 3.0]}))
    fc.test_eq(dict(zip(nr.key, nr.eval_ppl)), {'a': 1.0, 'b': 5.0, 'c': 3.0})


def test_paired_gaps_interval(pg):
    "The 95% interval is the t-interval of the mean log difference (2 degrees of freedom), as ratios less 1."
    half = stats.t.ppf(0.975, 2) * D.std(ddof=1) / math.sqrt(3)
    fc.test_close(np.array([pg.lo, pg.hi]), np.expm1([D.mean() - half, D.mean() + half]), eps=1e-12)
    assert pg.lo < pg.gap < pg.hi


def test_holm_by_hand():
    "Holm's step-down on four p-values: the smallest times 4, the next times 3, ..., never below the one before, at most 1."
    # sorted 0.01, 0.02, 0.03, 0.5 -> 0.04, 0.06, 0.06 (0.03 * 2 = 0.06 kept at 0.06), 1 (0.5 * 1 = 0.5 -> 0.5); in input order
    fc.test_close(holm([0.03, 0.5, 0.01, 0.02]), np.array([0.06, 0.5, 0.04, 0.06]), eps=1e-12)
    fc.test_close(holm([0.3, 0.9]), np.array([0.6, 0.9]), eps=1e-12)           # 0.9 * 1 = 0.9 >= 0.6
    fc.test_close(holm([0.7, 0.9]), np.array([1.0, 1.0]), eps=1e-12)           # 0.7 * 2 capped at 1, and 0.9 raised to it
    out = holm([0.01, np.nan, 0.04])                                            # NaN kept, and left out of the count (m = 2)
    assert math.isnan(out[1]) and np.allclose(out[[0, 2]], [0.02, 0.04]), out


def test_paired_gaps_holm_column():
    "paired_gaps corrects its p-values for the budgets it compares: two budgets, the same pairs, Holm over two."
    two = pd.concat([PF, PF.assign(budget=2.0, seed_loss=[PF.seed_loss[0], {0: 2.9, 1: 3.05, 2: 2.7}])], ignore_index=True)
    pg2 = paired_gaps(two)
    fc.test_close(pg2.p_holm.to_numpy(), holm(pg2.p.to_numpy()), eps=1e-15)
    assert (pg2.p_holm >= pg2.p).all() and pg2.p_holm.min() == 2 * pg2.p.min()
