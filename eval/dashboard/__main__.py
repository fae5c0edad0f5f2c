"""``python -m eval.dashboard``: see :mod:`eval.dashboard.page`."""

from eval.dashboard.page import main

if __name__ == "__main__":
    raise SystemExit(main())
