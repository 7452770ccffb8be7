"""`python -m sim`: the simulator's command line."""

from sim.cli import main

raise SystemExit(main())
