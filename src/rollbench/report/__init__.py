"""See and decide: `rollbench report` (one run as a page) and `rollbench compare` (two runs, tested).

`write_report(dir)` is what an eval calls at its end; `report_main` and `compare_main` are
the command bodies (`(positional, flags) -> exit code`), with `REPORT_HELP`/`COMPARE_HELP`.
"""

from rollbench.report.compare import Comparison, compare_runs
from rollbench.report.compare_cmd import COMPARE_HELP, compare_main
from rollbench.report.report import REPORT_HELP, report_main, write_report
from rollbench.report.runs import LoadedRun, load_run

__all__ = [
    "COMPARE_HELP", "REPORT_HELP", "Comparison", "LoadedRun", "compare_main", "compare_runs", "load_run", "report_main", "write_report",
]
