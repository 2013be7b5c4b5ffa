"Unit checks of sgatlin_nb.scaling moved from nbs/07_scaling.ipynb (issue 71): the frontier helpers on made-up numbers (interpolate_optimum, rank_optima, fieller_crossover against brute force, fits_cross, paired_gaps by hand, newest_runs). The page keeps the checks of what it shows."
import math

import fastcore.test as fc  # test_eq, test_close and test_fail as the page used them (imported by module: pytest would collect test_* names)
import numpy as np
import pandas as pd
from scipy import stats

from sgatlin_nb.scaling import (LADDER_KINDS, fieller_crossover, fit_frontier, fits_cross, interpolate_optimum, newest_runs,
                                paired_gaps, rank_optima)


def test_interpolate_optimum_finds_the_vertex_and_refuses_an_edge():
    "The parabola through a made-up optimum at 1,500 parameters finds it in any order; a lowest smallest model is no optimum."
    p = np.array([300.0, 1e3, 2e3, 8e3])                       # a parabola in log-parameters, lowest at 1,500
    l = 3 + 0.2 * np.log(p / 1500) ** 2
    fc.test_close(np.array(interpolate_optimum(p, l)), np.array([1500, 3]), eps=1e-6)
    fc.test_close(np.array(interpolate_optimum(p[::-1], l[::-1])), np.array([1500, 3]), eps=1e-6)  # any order
    fc.test_eq(interpolate_optimum(p[1:], np.log(p[1:])), None)   # the lowest is the smallest model: an edge, not an optimum


def _optima():
    "Five variants' made-up optima at one budget, three seeds each: SwiGLU lowest by the mean, sgatlin a close second."
    return pd.DataFrame([dict(variant=v, budget=1.0, n_seeds=3, loss=l, ppl=math.exp(l), ppl_interp=math.exp(l), seed_loss={0: l, 1: l + d, 2: l - d})
                         for v, l, d in zip(LADDER_KINDS, [3.0, 2.9, 2.95, 3.1, 2.91], [0.0, 0.05, 0.0, 0.0, -0.05])])


def test_rank_optima_orders_by_mean_and_pairs_the_top_two_by_seed():
    "The ranking follows the seed means; the best against the runner-up is lower at seed 1, higher at seed 2: not clear."
    r = rank_optima(_optima(), 1.0)   # SwiGLU lowest by the mean, sgatlin a close second: lower at seed 1, higher at seed 2
    fc.test_eq(r['order'], ['swiglu', 'sgatlin', 'moe', 'mlp', 'peer']); fc.test_eq(r['clear'], False)
    fc.test_close(np.array(list(r['pair'].values())), np.exp([-0.01, 0.09, -0.11]) - 1, eps=1e-12)


def test_rank_optima_declines_too_few_seeds_or_an_unbracketed_optimum():
    "A variant with one seed, or whose optimum the ladder does not bracket with half-rungs, gives no ranking."
    f = _optima()
    fc.test_eq(rank_optima(f.assign(n_seeds=[3, 3, 1, 3, 3]), 1.0), None)   # a variant with one seed: no ranking
    fc.test_eq(rank_optima(f.assign(ppl_interp=[1.0, 1.0, math.nan, 1.0, 1.0]), 1.0), None)  # nor one whose optimum the ladder brackets more coarsely


def _crossing():
    "Seven budgets at which sgatlin's made-up loss falls faster than the MLP's, with noise: the two cross."
    c = np.geomspace(1e11, 1e14, 7)
    noise = np.array([0.01, -0.012, 0.004, 0.009, -0.015, 0.002, 0.006])
    la, lb = 2.0 - 0.05 * np.log(c / 1e11), 2.05 - 0.07 * np.log(c / 1e11) + noise   # b's falls faster: they cross
    fr = pd.DataFrame([dict(variant=v, budget=c_, loss=math.exp(l)) for v, ls in (('mlp', la), ('sgatlin', lb)) for c_, l in zip(c, ls)])
    return c, noise, la, lb, fr


def test_fieller_crossover_matches_brute_force():
    "Fieller's interval is the set of 20,001 log-budgets whose t statistic passes; its centre is fits_cross of the two fits."
    # the t statistic of the fitted log ratio at each log-budget, by its definition (prediction over its standard error),
    # and the budgets that pass are the interval
    c, _, la, lb, fr = _crossing()
    fcx = fieller_crossover(fr)
    x, y = np.log(c), lb - la
    s, i = np.polyfit(x, y, 1)
    sd = math.sqrt(((y - i - s * x) ** 2).sum() / (len(x) - 2))
    grid = np.linspace(np.log(1e9), np.log(1e16), 20_001)
    tstat = np.abs(i + s * grid) / (sd * np.sqrt(1 / len(x) + (grid - x.mean()) ** 2 / ((x - x.mean()) ** 2).sum()))
    kept = grid[tstat <= stats.t.ppf(0.975, len(x) - 2)]
    fc.test_close(np.log([fcx['lo'], fcx['hi']]), np.array([kept.min(), kept.max()]), eps=2 * (grid[1] - grid[0]))
    fc.test_close(fcx['crossover'], fits_cross(fit_frontier(c, np.exp(la)), fit_frontier(c, np.exp(lb))), eps=1e-6 * fcx['crossover'])
    assert fcx['lo'] < fcx['crossover'] < fcx['hi'] and fcx['df'] == 5


def test_parallel_frontiers_give_no_bounded_crossover():
    "Parallel noisy frontiers give an unbounded interval; slopes a hair apart cross at inf; fewer than 3 budgets are refused."
    c, noise, la, _, fr = _crossing()
    flat = fieller_crossover(fr.assign(loss=np.exp(np.r_[la, la + 0.01 + noise])))
    fc.test_eq((flat['lo'], flat['hi']), (0.0, math.inf))              # parallel frontiers and noise: no bounded interval
    fc.test_eq(fits_cross((0.0, -0.1), (1e-3, -0.1 - 1e-9)), math.inf)    # slopes a hair apart: beyond any float, not an error
    fc.test_fail(lambda: fieller_crossover(fr[fr.budget < 3e11]), contains='need 3')


def test_paired_gaps_by_hand():
    "Three paired seeds, sgatlin lower at two: the gaps, the mean gap, the paired t and both sign-test p-values by hand."
    pf = pd.DataFrame([dict(variant='mlp', budget=1.0, scale=1, loss=3.0, ppl=math.exp(3.0), seed_loss={0: 3.0, 1: 3.1, 2: 2.9}),
                       dict(variant='sgatlin', budget=1.0, scale=1.5, loss=2.95, ppl=math.exp(2.95), seed_loss={0: 2.9, 1: 3.15, 2: 2.8})])
    pg = paired_gaps(pf).iloc[0]
    d = np.array([-0.1, 0.05, -0.1])
    fc.test_close(np.array(pg.gaps), np.expm1(d), eps=1e-12); fc.test_close(pg.gap, math.exp(-0.05) - 1, eps=1e-12)
    fc.test_close(pg.t, d.mean() / (d.std(ddof=1) / math.sqrt(3)), eps=1e-9); fc.test_eq((pg.df, pg.lower), (2, 'sgatlin'))
    fc.test_close(pg.sign_p, 1.0, eps=1e-12)                              # 2 of 3 lower: no evidence either way
    fc.test_close(paired_gaps(pf.assign(seed_loss=[pf.seed_loss[0], {0: 2.9, 1: 3.05, 2: 2.7}])).sign_p.iloc[0], 0.25, eps=1e-12)


def test_newest_runs_keeps_the_later_run_of_a_key():
    "The later table's run replaces the earlier's of the same key; other runs stay."
    nr = newest_runs(pd.DataFrame({'key': ['a', 'b'], 'eval_ppl': [1.0, 2.0]}), pd.DataFrame({'key': ['b', 'c'], 'eval_ppl': [5.0, 3.0]}))
    fc.test_eq(dict(zip(nr.key, nr.eval_ppl)), {'a': 1.0, 'b': 5.0, 'c': 3.0})
