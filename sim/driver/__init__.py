"""Playing the loop: the `flywheel-sim` command line, the simulation (a span of days played in
order), the drivers that run each day's Dagster runs and sensor ticks (in process, or through
a running daemon), and the policy comparison."""
