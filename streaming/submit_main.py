"""spark-submit's entry file: ``siftstream``'s command line inside an application that spark-submit
started (``siftstream submit`` names it; docs/guide/cluster.md).

spark-submit runs a file, not a module, and puts this file's folder first on ``sys.path``; that
entry is replaced by the folder that holds the project's packages, so that the driver imports this
install of SiftStream (its files: the dashboard page, the jars' pom) ahead of the ``--py-files``
zip, which is for the executors. The session then takes its master and settings from spark-submit
(:func:`streaming.session.submitted`).
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__: list[str] = []

if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    from streaming.cli import main

    sys.exit(main())
