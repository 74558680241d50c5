"""Percentiles, one definition for every tool: linear between closest ranks (numpy's default
and k6's, so deploy/report's p99 of a CSV equals k6's own p(99) of the same samples)."""


def percentile(sorted_values, p):
    """p in [0, 1] of an ascending list; None when it is empty."""
    v = sorted_values
    if not v:
        return None
    i = p * (len(v) - 1)
    lo = int(i)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (i - lo)


def median(values):
    """The median of the values that are not None, or None when there are none."""
    return percentile(sorted(v for v in values if v is not None), 0.5)


def spread(values):
    """(max - min) / median of the values that are not None: how far repeated runs of one
    figure disagree; None with fewer than two or a zero median."""
    v = [x for x in values if x is not None]
    m = median(v)
    return (max(v) - min(v)) / m if len(v) > 1 and m else None


def nearest_rank(sorted_values, p):
    """Nearest-rank percentile, p in [0, 100] (bench/*'s tables): an observed value."""
    if not sorted_values:
        return None
    k = max(1, -(-p * len(sorted_values) // 100))
    return sorted_values[int(k) - 1]


def get(d, *path):
    """The figure at a path of nested dicts (a run's JSON), or None where any step is missing."""
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d
