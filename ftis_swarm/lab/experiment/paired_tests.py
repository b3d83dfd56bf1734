"""Paired tests over seeds: one-sided t-test, exact sign-flip test, bootstrap interval, minimum detectable effect.

Pure functions of per-seed differences `d` (arm minus base, one value per seed), used by the
experiment's fixed statistics (`stats.py`, which states the rules):

- `t_test_p`: one-sided one-sample t-test of `mean(d) > 0` (or `< 0`), scipy's; equal to
  `scipy.stats.ttest_rel(arm, base)` on the same pairs;
- `sign_flip_p`: the exact permutation test of a paired design: under the null each
  difference is as likely negated, so p is the share of the `2^n` sign patterns whose mean
  is at least the observed one (at most, for "less"), ties counted; its smallest value is
  `2^-n`. Above MAX_EXACT_SEEDS values, RANDOM_PATTERNS patterns drawn with a fixed rng.
  Not `scipy.stats.permutation_test(permutation_type="samples")`: scipy counts a tie only
  within `100 eps |observed|`, while differences rounded to 12 digits (`stats.paired`) tie
  within about 1e-12, so it misses ties (experiment 29, vertical-fvis against vertical-ftis
  for A: 0.0371 for the recorded 0.0527); on integers the two agree;
- `bootstrap_interval`: percentile interval of the mean difference over resampled seeds
  and, given per-item differences, items resampled jointly: one draw of item indices used
  for every drawn seed (every seed scores the same held-out questions, so an item's
  difficulty is shared across seeds and resampling it per seed would understate the spread),
  and the same items for both arms, so the pairing on items is kept; a fixed rng seed;
- `min_detectable_effect`: `(t_{1-alpha,n-1} + t_{power,n-1}) * sd(d) / sqrt(n)`, the true
  mean difference these seeds would detect with probability `power` at level `alpha`.
"""

from __future__ import annotations

import math
import warnings
from typing import Literal, Optional, Sequence

import numpy as np
from scipy import stats as sps

Alternative = Literal["greater", "less"]

POWER = 0.8
BOOTSTRAP_DRAWS = 2000
BOOTSTRAP_SEED = 0
MAX_EXACT_SEEDS = 20
RANDOM_PATTERNS = 100_000
_CHUNK = 1 << 15
"""Sign patterns evaluated at once (bounds the memory of the exact test)."""
_DRAWS_AT_ONCE = 256
"""Bootstrap draws resampled at once (`draws x seeds x items` indices)."""


def t_test_p(diffs: Sequence[float], alternative: Alternative = "greater") -> float:
    """One-sided one-sample t-test p of `mean(diffs) > 0` (or `< 0`); NaN under 2 values or no spread and mean 0."""
    x = np.asarray(diffs, dtype=float)  # (n,)
    if x.size < 2:
        return math.nan
    with warnings.catch_warnings():  # scipy warns on (near) constant data; its p (0, 1 or NaN) stands
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(sps.ttest_1samp(x, 0.0, alternative=alternative).pvalue)


def sign_flip_p(diffs: Sequence[float], alternative: Alternative = "greater") -> float:
    """Exact one-sided sign-flip p: the share of the `2^n` sign patterns with mean >= observed (<= for "less")."""
    x = np.asarray(diffs, dtype=float)  # (n,)
    n = x.size
    if n == 0:
        return math.nan
    observed = float(x.sum())
    tol = 1e-9 * max(1.0, float(np.abs(x).sum()))
    side = 1.0 if alternative == "greater" else -1.0
    if n > MAX_EXACT_SEEDS:
        signs = np.random.default_rng(BOOTSTRAP_SEED).choice([-1.0, 1.0], size=(RANDOM_PATTERNS, n))  # (P, n)
        return float(np.mean(side * (signs @ x - observed) >= -tol))
    hits = 0
    for start in range(0, 1 << n, _CHUNK):
        codes = np.arange(start, min(1 << n, start + _CHUNK))  # (k,)
        signs = 1.0 - 2.0 * ((codes[:, None] >> np.arange(n)) & 1)  # (k, n)
        hits += int(np.count_nonzero(side * (signs @ x - observed) >= -tol))
    return hits / float(1 << n)


def min_detectable_effect(diffs: Sequence[float], *, alpha: float, power: float = POWER) -> float:
    """`(t_{1-alpha,n-1} + t_{power,n-1}) * sd(diffs) / sqrt(n)`; NaN under 2 values."""
    x = np.asarray(diffs, dtype=float)  # (n,)
    n = x.size
    if n < 2:
        return math.nan
    df = n - 1
    return float((sps.t.ppf(1 - alpha, df) + sps.t.ppf(power, df)) * x.std(ddof=1) / math.sqrt(n))


def bootstrap_interval(diffs: Sequence[float], item_diffs: Optional[np.ndarray] = None, *,
                       draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean difference, resampling seeds and, given `item_diffs` `(seeds, items)`
    (arm minus base per item, the same items in every seed), the items jointly: one item draw for all seeds."""
    x = np.asarray(diffs, dtype=float)  # (n,)
    if x.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    n = x.size
    means = np.empty(draws)  # (draws,)
    for lo in range(0, draws, _DRAWS_AT_ONCE):
        k = min(_DRAWS_AT_ONCE, draws - lo)
        pick = rng.integers(0, n, size=(k, n))  # (k, n) seeds
        if item_diffs is None:
            means[lo:lo + k] = x[pick].mean(axis=1)  # (k,)
            continue
        m = item_diffs.shape[1]
        items = rng.integers(0, m, size=(k, 1, m))  # (k, 1, m) items: one draw for every seed and both arms
        means[lo:lo + k] = item_diffs[pick[..., None], items].mean(axis=(1, 2))  # (k,)
    low, high = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(low), float(high)

