"""Built-in benchmarks, one module each; they register themselves when imported.

`rollbench.config.env.BENCHMARKS` lists them lazily so that importing rollbench never
imports a simulator.
"""
