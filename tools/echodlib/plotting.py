"""matplotlib for the reports' plots (deploy/report, bench/study): one set-up, one log axis, one
way to save. python3-matplotlib is imported only when a plot is made (ImportError without it).
"""


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def figure(size=(7, 4.2)):
    """(fig, ax) of one plot at the reports' resolution."""
    return pyplot().subplots(figsize=size, dpi=90)


def log_y(ax):
    """A log y axis labelled 1, 2, 5 per decade in plain numbers (ms read better so)."""
    from matplotlib.ticker import FuncFormatter, LogLocator
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def save(fig, ax, path, grid="both"):
    """Grid, legend and layout, then the PNG at path; returns path."""
    ax.grid(True, which=grid, lw=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    pyplot().close(fig)
    return path
