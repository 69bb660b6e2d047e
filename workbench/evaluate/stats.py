"""The gate's statistics: a case's mean and spread over its samples, and whether a drop from the
baseline is larger than the noise of repeated trials could explain.

The test is Welch's t-test, one-sided: the drop of a mean (a case's, or the suite's) is divided by
its standard error, built from each side's own sample variance (Welch: the variances need not be
equal, since a new prompt may be more or less erratic than the old one), with the Welch-Satterthwaite
degrees of freedom. It was chosen over a bootstrap or a permutation test because it works from
the few samples an eval affords (2 to 10 epochs), gives the same answer on every run (no resampling
seed), needs no dependency, and can be said in one sentence. The suite's mean is tested the same
way: the cases are the same on both sides, so its only noise is the cases' own sampling noise (the
sum of their variances over the number of cases squared).

A side with one sample has no variance of its own and borrows the other side's; when neither side
varies (one sample each, or identical answers on replay) there is no noise, and any drop is real:
the gate then decides on the tolerance alone, exactly as it did before epochs existed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist, fmean, variance


def mean(values: list[float]) -> float:
    return fmean(values)


def spread(values: list[float]) -> float | None:
    """The sample standard deviation; None for a single sample (no spread can be measured)."""
    return math.sqrt(variance(values)) if len(values) > 1 else None


@dataclass(frozen=True)
class Drop:
    drop: float  # mean before - mean after: positive when the score fell
    p_value: float  # one-sided: the chance of a drop at least this large if nothing had changed

    def is_real(self, confidence: float) -> bool:
        """The drop is unlikely to be noise at `confidence` (e.g. 0.95)."""
        return self.drop > 0 and self.p_value < 1 - confidence


def _parts(before: list[float], after: list[float]) -> list[tuple[float, float]]:
    """(variance of the mean, degrees of freedom) of each side of one comparison; none when
    neither side has a variance."""
    variances = [(variance(side), len(side) - 1) if len(side) > 1 else None for side in (before, after)]
    if variances == [None, None]:
        return []
    known = next(item for item in variances if item is not None)
    return [((item or known)[0] / len(side), (item or known)[1]) for item, side in zip(variances, (before, after))]


def drop_test(pairs: list[tuple[list[float], list[float]]]) -> Drop:
    """Welch's one-sided test of the drop of the mean over `pairs` (before, after samples): one
    pair for a case, every case's pair for the suite mean."""
    count = len(pairs)
    drop = fmean(fmean(before) - fmean(after) for before, after in pairs)
    parts = [(var / count**2, df) for before, after in pairs for var, df in _parts(before, after)]
    variance_of_drop = sum(var for var, _ in parts)
    if variance_of_drop <= 0:  # no noise: a drop is a drop
        return Drop(drop, 0.0 if drop > 0 else 1.0)
    denominator = sum(var * var / df for var, df in parts if var > 0)
    freedom = variance_of_drop**2 / denominator
    return Drop(drop, t_sf(drop / math.sqrt(variance_of_drop), freedom))


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` (real, > 0) degrees of freedom."""
    if df > 1e7:
        return 1 - NormalDist().cdf(t)
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return tail if t > 0 else 1 - tail


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _continued_fraction(a, b, x) / a
    return 1 - front * _continued_fraction(b, a, 1 - x) / b


def _continued_fraction(a: float, b: float, x: float) -> float:
    """Lentz's method for the incomplete beta's continued fraction (Numerical Recipes, betacf)."""
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return result
