"""`python -m sim`: the simulator's command line."""

from sim.driver.cli import main

raise SystemExit(main())
