"""The stop rules: which episodes an adaptive run still wants, and the estimates that hold
under the rule that stopped each task.

    adaptive.py    the seam the scheduler and the lifecycle see: `Rule`, `Stops` (which units
                   are still wanted, fed each record as it is logged), `apply` (what counts of
                   a merged log); --eval.ci_width's `StopRule`
    versus.py      --eval.versus: this run against another one, paired, anytime-valid
    paired.py      --eval.perturb_stop=paired: a sweep's conditions against its control
    sequential.py  the sequential tests and confidence sequences the two read
    estimates.py   rates and intervals that hold under a stop (a task's, the tasks' mean)
    rules.py       the rule a run's config asks for (`stop_rule`), and the checks before it runs

All of it is above the pure statistics (`rollbench.stats`) and the durable log
(`rollbench.results`), and below the report, the scheduler and the lifecycle.
"""
