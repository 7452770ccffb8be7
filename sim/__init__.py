"""The simulator: the flywheel played against a replayed world, and judged.

Three rooms, in the order they depend on one another: `world` (the outside world: traffic,
clock, drift, annotators), `driver` (playing the loop over days: the command line, the simulation,
the drivers) and `judge` (the report and the judgement of alarms).
"""
