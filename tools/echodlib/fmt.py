"""Numbers in tables: one formatter for every script's Markdown and log lines.

A figure gets `nd` decimals below 100, `hundreds` (at most nd) from 100 to 1,000 and none from
1,000: enough digits to compare two arms, no more than the noise carries. A missing figure is "-".
"""


def num(v, nd=1, hundreds=0):
    """v as a table cell (see the module's docstring); a string passes through."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    a = abs(v)
    if a >= 1000:
        return "%.0f" % v
    if a >= 100:
        return "%.*f" % (min(nd, hundreds), v)
    return "%.*f" % (nd, v)


def ms(v):
    """Milliseconds: three decimals below 1 ms, two below 10, then num's."""
    if v is None:
        return "-"
    if v < 1:
        return "%.3f" % v
    if v < 10:
        return "%.2f" % v
    return num(v, 1, 1)


def ratio(a, b):
    """a / b, or None when either is missing or b is 0."""
    return a / b if a is not None and b else None


def times(a, b, nd=2):
    """a / b as "1.23×", or "-"."""
    r = ratio(a, b)
    return "-" if r is None else "%.*f×" % (nd, r)


def pair(a, b, nd=2, hundreds=1):
    """"a / b", each as num."""
    return "%s / %s" % (num(a, nd, hundreds), num(b, nd, hundreds))
