"""Imports the analysis scripts' packages, or stops with one line saying
which is missing for this interpreter and how to install it (instead of a
traceback when the first python3 on PATH is not the one with the packages)."""
import importlib
import sys


def require(*names):
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            print(f"{sys.argv[0]}: the Python package '{name.split('.')[0]}' is missing for {sys.executable}: "
                     f"pip install -r analysis/requirements.txt (or apt install python3-h5py python3-numpy "
                     f"python3-matplotlib python3-torch), or run the script with the python3 that has them",
                  file=sys.stderr)
            sys.exit(2)
    return modules if len(modules) > 1 else modules[0]


def pyplot():
    """matplotlib.pyplot drawing to files (no display needed)."""
    matplotlib = require("matplotlib")
    matplotlib.use("Agg")
    return require("matplotlib.pyplot")


def save_figure(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
